package fsm

// Ganeti opcode parameters gnt does not take, with the reason: a request
// naming one is refused (400, field naming it) as any unknown field is,
// and the message says why. docs/api.md lists them per resource. The
// names are Ganeti's (OP_INSTANCE_CREATE, OP_INSTANCE_SET_PARAMS,
// OP_INSTANCE_REINSTALL, OP_INSTANCE_REPLACE_DISKS, OP_NODE_EVACUATE,
// OP_CLUSTER_SET_PARAMS); a parameter an opcode does take never reaches
// this table.
var unsupportedReasons = map[string]string{
	// Instance creation and modification.
	"force_variant":           "gnt does not check OS variants, so there is nothing to force",
	"file_driver":             "gnt's file disks have one driver (raw files through QEMU)",
	"file_storage_dir":        "file disks live in the cluster's file storage directory, not one per instance",
	"osparams_private":        "gnt has no private OS parameters; use osparams",
	"osparams_secret":         "gnt has no secret OS parameters; use osparams",
	"pnode_uuid":              "give the node by name (pnode)",
	"snode_uuid":              "give the node by name (snode)",
	"src_node":                "instance import is not supported (mode is create only)",
	"src_node_uuid":           "instance import is not supported (mode is create only)",
	"src_path":                "instance import is not supported (mode is create only)",
	"source_handshake":        "remote instance import is not supported",
	"source_instance_name":    "remote instance import is not supported",
	"source_shutdown_timeout": "remote instance import is not supported",
	"source_x509_ca":          "remote instance import is not supported",
	"compress":                "instance import and export are not supported",
	"instance_communication":  "gnt has no instance communication network",
	"helper_startup_timeout":  "gnt has no instance communication helper",
	"helper_shutdown_timeout": "gnt has no instance communication helper",
	"ext_params":              "gnt has no ext disk template",
	"remote_node_uuid":        "give the node by name (remote_node)",
	"hotplug":                 "gnt always hot-plugs the disks it adds to a running instance",
	"hotplug_if_possible":     "gnt always hot-plugs the disks it adds to a running instance",
	"ignore_ipolicy":          "gnt enforces no instance policy, so there is none to ignore here",
	"conflicts_check":         "gnt always refuses an IP another NIC of the cluster has",
	// Node evacuation.
	"ignore_soft_errors": "gnt's allocator reports no soft errors",
	// Cluster modification.
	"hv_state":                       "gnt keeps no static hypervisor state; the agents report it",
	"disk_state":                     "gnt keeps no static disk state; the agents report storage",
	"vg_name":                        "a node's storage is what its agent reports (storage units), not a cluster volume group name",
	"os_hvp":                         "per-OS hypervisor parameters are not supported; set the instance's hvparams",
	"osparams_private_cluster":       "gnt has no private OS parameters; use osparams",
	"max_running_jobs":               "the executor's concurrency is a gntd setting",
	"max_tracked_jobs":               "the executor's concurrency is a gntd setting",
	"maintain_node_health":           "maintd keeps the nodes' health (maint_* parameters)",
	"prealloc_wipe_disks":            "gnt does not wipe new disks",
	"ipolicy":                        "gnt enforces no instance policy",
	"drbd_helper":                    "gnt runs no DRBD usermode helper",
	"default_iallocator_params":      "gnt's allocator takes no parameters",
	"mac_prefix":                     "MAC addresses are derived from the instance's UUID",
	"master_netdev":                  "gnt has no master IP: every master candidate answers the API",
	"master_netmask":                 "gnt has no master IP: every master candidate answers the API",
	"use_external_mip_script":        "gnt has no master IP: every master candidate answers the API",
	"reserved_lvs":                   "gnt does not verify logical volumes",
	"hidden_os":                      "OS visibility is not supported",
	"blacklisted_os":                 "OS blacklisting is not supported",
	"enabled_disk_templates":         "the disk templates are fixed by what the nodes' storage offers",
	"modify_etc_hosts":               "gnt does not edit /etc/hosts",
	"shared_file_storage_dir":        "the shared file storage directory is a gntd setting",
	"gluster_storage_dir":            "gnt has no gluster disk template",
	"install_image":                  "gnt installs OSes with OS definitions only",
	"instance_communication_network": "gnt has no instance communication network",
	"zeroing_image":                  "gnt does not zero disks",
	"compression_tools":              "instance import and export are not supported",
	"enabled_user_shutdown":          "user shutdown is the kvm hypervisor parameter user_shutdown",
	"enabled_data_collectors":        "maintd's collectors are fixed",
	"data_collector_interval":        "set maint_diagnose_interval",
}

// UnsupportedReason says why gnt does not take a Ganeti parameter ("" for
// a name that is not one of them).
func UnsupportedReason(field string) string { return unsupportedReasons[field] }
