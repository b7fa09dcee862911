// Package repair is gnt's automatic repair: harep (instance autorepair
// driven by Ganeti's ganeti:watcher:autorepair tags) and maintd (incidents
// from the nodes' self-diagnose collectors, repair rounds, its HTTP API on
// port 1816 and a web status page).
//
// Decide, then do: PlanHarep and PlanRound are pure functions of the
// observed state and the time; the leader-only Service turns a round's
// plan into one fsm.RepairRound command, which submits the round's jobs
// and writes the tags and incidents that account for them in one Raft
// entry, fenced by the leader's executor epoch. Everything maintd knows
// lives in the replicated state, so a new leader carries on the same
// incidents with the same ids.
package repair
