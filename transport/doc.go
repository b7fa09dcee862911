// Package transport owns the network layer under Raft: a TCP stream layer
// whose outgoing connections leave from the node's own address, optional TLS
// on top of it, the raft.NetworkTransport built on it, and a fault-injection
// wrapper (Faults) that tests and chaos runs use to cut, slow down and break
// connections in process. The stream layer can report accepted connections
// that their peer ended (WithPeerClosed) and probe whether a peer's port
// still listens (Probe, Refused): a peer's process that died ends its
// connections and refuses new ones long before its silence is noticed. It also owns gossip: Gossip is one memberlist
// member (encrypted with a key the caller derives, node meta with role,
// addresses and version, failure detector tuned in LANGossipTiming) that
// reports every member's state — alive, suspect, dead or left — with the
// time it changed.
//
// # Gossip and memberlist's delegates
//
// memberlist calls its delegates with its member table locked. Gossip's
// delegates therefore never block and never call memberlist: they count
// the event and flag it in a one-slot channel (events coalesce, none is
// lost: the flag only says "read the table"). Gossip's goroutine then reads
// memberlist's table under memberlist's own lock (gossip_table.go explains
// why the public API cannot be used) and records what changed.
//
// # Source addresses
//
// All of 127.0.0.0/8 is local, so a development cluster gives every node its
// own loopback address (127.0.0.11, .12, ...). A socket that is not bound
// before connecting leaves from 127.0.0.1, and a firewall rule or a peer that
// identifies the sender by source address then cannot tell the nodes apart.
// StreamLayer.Dial therefore binds the dialer to the IP the layer listens on
// (port 0, chosen by the kernel).
//
// # Fault injection
//
// Faults identifies a peer by IP, not by IP and port: the remote port of an
// accepted connection is an ephemeral port of the dialer, never the peer's
// Raft port, so the IP is all an accepted connection tells about its peer.
// Give each node its own IP (as the dev cluster does) for Faults to tell them
// apart.
//
// # Goroutines
//
// Gossip starts one goroutine of its own (it reads the member table on
// events and every Poll interval, and gossips meta changes) plus
// memberlist's (listeners, probe and gossip tickers, packet handler);
// Leave and Shutdown stop all of them and return when they are gone.
// StreamLayer, Faults and the wrapper returned by WrapStreamLayer start no
// goroutines; injected delays run on the goroutine that writes.
// NewNetworkTransport returns a raft.NetworkTransport, which starts one
// goroutine accepting connections and one per accepted connection. The accept
// goroutine stops when the transport is closed: raft.Raft.Shutdown closes it,
// or the owner calls NetworkTransport.Close, which also closes the stream
// layer. A per-connection goroutine stops when its connection is closed, by
// the peer or by Faults.
package transport
