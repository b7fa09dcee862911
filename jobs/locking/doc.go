// Package locking is the leader's in-memory lock manager: the locks a job's
// opcodes take on the cluster, its instances, node groups, nodes, node
// resources and networks, as Ganeti's lock levels. This far it holds the
// levels, modes and requests and how requests are checked and put in the
// order locks are taken.
package locking
