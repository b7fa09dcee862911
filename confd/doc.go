// Package confd speaks Ganeti's confd protocol: authenticated UDP queries
// about the cluster configuration, answered by every master candidate from
// its own replica of the state, followers included.
//
// It has three parts:
//
//   - the codec (codec.go, json.go, request.go; its JSON is read by
//     fsm.JSONReader): the "plj0" framing, the signed {"msg", "salt",
//     "hmac"} envelope with HMAC-SHA1 over salt+msg, and the inner
//     request and reply objects. It is pure: it knows nothing of sockets
//     or clocks, and it is fuzzed;
//   - the answers (answer.go, pointer.go): a pure function from a
//     request, the state and the master's name to a reply, with Ganeti's
//     request types, query shapes, status and error codes;
//   - the Server (server.go), which reads datagrams, drops what fails
//     authentication, the clock window or the replay cache (replay.go),
//     and answers from a Source; and the Client (client.go), which asks
//     several candidates at once and keeps the reply with the highest
//     configuration serial, as Ganeti's client does.
//
// Goroutines, and who stops them: Server.Serve runs one reader goroutine
// per worker on one UDP socket; all of them end when the context given to
// Serve ends (Serve closes the socket and waits). The Client runs no
// goroutine of its own: Query reads replies on the caller's goroutine
// until it has enough, or its deadline passes.
package confd
