// Package iallocator runs instance allocators by name: gnt's built-in
// (Builtin, "hail", package jobs/alloc) and external programs that speak
// Ganeti's iallocator protocol (doc/iallocator.rst, version 2), so that a
// site's existing allocator runs unchanged.
//
// An external allocator is a program in the iallocators directory
// (DefaultDir, or gntd --iallocators-dir), accepted only under the rule of
// the OOB helpers (oob.Whitelist: a regular file owned by root or the
// gntd's user, not writable by group or others). It is started, on the
// leader in a job step (never in FSM apply), with one argument: the name
// of a file holding the JSON input message (cluster, nodegroups, nodes,
// instances and the request of one of the modes allocate, relocate,
// change-group, node-evacuate, multi-allocate; Ganeti's pre-2.6
// multi-evacuate is never sent, as Ganeti 2.6 and later do not send it). It must
// exit 0 and print the JSON response {success, info, result} on stdout
// within Runner.Timeout and Runner.MaxOutput bytes. The response is
// validated fully against the request (ParseResponse): its shape per
// mode, and every node, group and instance it names.
//
// A list of allocators (the cluster's default_iallocator, or an opcode's
// iallocator, "name[,name...]") is tried in order until one answers with
// a usable placement (Try); the error of a list that all failed names
// each allocator and its reason.
package iallocator
