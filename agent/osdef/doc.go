// Package osdef finds, checks and runs Ganeti OS definitions on a node
// (Ganeti's ganeti-os-interface(7)): a directory per OS, in a search path
// (DefaultSearchPath: /srv/ganeti/os, /usr/share/ganeti/os, /etc/gnt/os;
// gntd --os-search-path), holding the executables create, import, export,
// rename (and verify from API version 20) and the text files
// ganeti_api_version, variants.list and parameters.list.
//
// Discover reads the search path into a Report: every OS found, valid or
// not, with the reason; the first directory of the path that holds a name
// wins, as in Ganeti. An OS is valid when its API versions include one gnt
// speaks (APIVersions: 20, 15, 10), its files parse, and each script it
// needs passes the whitelist rule of the OOB helpers (oob.Whitelist: a
// regular file inside the search-path directory, owned by root or by the
// gntd's user, not writable by group or others, executable by its owner).
// Instances name an OS as "os+variant"; the variant must be listed in
// variants.list (an OS without variants takes none).
//
// Run executes one script for one instance with Ganeti's environment (Env:
// OS_API_VERSION, INSTANCE_NAME, INSTANCE_OS, OS_NAME, OS_VARIANT,
// HYPERVISOR, INSTANCE_HV_*, INSTANCE_BE_*, DISK_COUNT, DISK_<n>_PATH,
// DISK_<n>_ACCESS, ..., NIC_COUNT, NIC_<n>_MAC, ..., OSP_*, DEBUG_LEVEL),
// nothing inherited from gntd, in the OS's directory, in its own process
// group that is killed at the timeout, its output kept (bounded) for the
// job log.
//
// A hypervisor driver installs an OS with one call, once it has the
// instance's disks as paths on this node (files or block devices, in the
// order of inst.Disks):
//
//	out, err := cfg.Install(ctx, osdef.Input{
//		Instance: inst, Hypervisor: "kvm", DiskPaths: paths, Reinstall: reinstall,
//	})
//
// Install looks the instance's OS up (Lookup: unknown OS, invalid OS or
// unknown variant fail with ErrUnknown, ErrInvalid or ErrVariant), runs its
// create script, and returns what the script printed; a failure is a
// *ScriptError carrying that output. Rename, Export, Import and Verify run
// the other scripts the same way.
//
// The package runs processes and reads files; it keeps no state between
// calls, starts no goroutine that outlives a call, and imports only fsm
// (the instance types) and oob (the whitelist rule).
package osdef
