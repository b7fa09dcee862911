// Package pki is the cluster's certificate authority: creating the CA at
// cluster init, signing node and admin certificates from certificate
// requests, sealing the CA key for the replicated state, and the TLS
// configurations every port of gntd and the gnt CLI use.
//
// Every certificate is ECDSA P-256. Node certificates carry the node's name
// as common name and DNS name and its addresses as IP SANs, and serve both
// as server and as client certificates (Raft, node RPC, forwarding between
// candidates, joins). Admin certificates are client certificates for
// operators. A certificate starts an hour before it is issued, so a few
// minutes of clock skew between machines never breaks a handshake.
//
// A Store holds one gntd's (or one client's) identity and trust bundle and
// can be replaced while connections are made, which is how certificates
// are renewed and the CA rotated without a restart: TLS configurations
// built from a Store read its current contents on every handshake.
//
// The package imports nothing of the project.
package pki
