"""Calls every public method of Ganeti's RAPI client against one gntd.

Usage: ganeti_client_all.py HOST PORT CAFILE USER PASSWORD SUFFIX

Each method is called once (a few twice, in other forms), in an order that
builds what the next ones need (a group, a network, a filter, an instance),
and one line is printed per call:

    OK <method> <short result>
    APIERR <method> <http code> <message>
    EXC <method> <exception type> <message>

EXC is the failure TestGanetiClientEveryMethod looks for: the client must
either succeed or raise GanetiApiError. A method of the client that this
script does not call is printed as "MISSING <method>" (the test fails on
it too), so a newer client's methods cannot slip through untested.
SUFFIX makes the names of this run's objects unique, so the script can run
against the leader and then against a follower of the same cluster.
"""

import inspect
import sys

from ganeti.rapi import client as rc

host, port, ca, user, pw, sfx = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
c = rc.GanetiRapiClient(host, port=port, username=user, password=pw,
                        curl_config_fn=rc.GenericCurlConfig(cafile=ca))

called = set()
results = {}


def short(v):
    s = repr(v)
    return s if len(s) <= 120 else s[:117] + "..."


def wait(jid):
    """Waits for a job; returns its final status (the call succeeded)."""
    if not isinstance(jid, (int, str)):
        return jid
    c.WaitForJobCompletion(jid, period=0.1, retries=600)
    return c.GetJobStatus(jid)["status"]


def call(name, fn, job=False):
    called.add(name)
    try:
        v = fn()
        if job:
            v = (v, wait(v))
        results[name] = v
        print("OK", name, short(v))
        return v
    except rc.GanetiApiError as e:
        print("APIERR", name, e.code, str(e).replace("\n", " ")[:300])
    except Exception as e:  # the failure this script exists to find
        print("EXC", name, type(e).__name__, str(e).replace("\n", " ")[:300])
    sys.stdout.flush()
    return None


inst = "web-" + sfx
inst2 = "web2-" + sfx
group = "g-" + sfx
net = "net-" + sfx
octet = sum(map(ord, sfx)) % 200 + 20

# Cluster.
call("GetVersion", c.GetVersion)
call("GetFeatures", c.GetFeatures)
call("GetInfo", c.GetInfo)
call("GetOperatingSystems", c.GetOperatingSystems)
call("GetClusterTags", c.GetClusterTags)
call("AddClusterTags", lambda: c.AddClusterTags(["t-" + sfx]), job=True)
call("DeleteClusterTags", lambda: c.DeleteClusterTags(["t-" + sfx]), job=True)
call("ModifyCluster", lambda: c.ModifyCluster(candidate_pool_size=3, reason="every method"), job=True)
call("RedistributeConfig", c.RedistributeConfig, job=True)
call("Query", lambda: c.Query("node", ["name", "role"], ["=", "name", "node21"]))
call("QueryFields", lambda: c.QueryFields("instance", ["name", "status"]))

# Nodes.
call("GetNodes", lambda: c.GetNodes(bulk=True))
call("GetNode", lambda: c.GetNode("node21"))
call("GetNodeRole", lambda: c.GetNodeRole("node22"))
call("SetNodeRole", lambda: c.SetNodeRole("node22", "regular"), job=True)
call("ModifyNode", lambda: c.ModifyNode("node22", drained=False), job=True)
call("GetNodeTags", lambda: c.GetNodeTags("node21"))
call("AddNodeTags", lambda: c.AddNodeTags("node21", ["t-" + sfx]), job=True)
call("DeleteNodeTags", lambda: c.DeleteNodeTags("node21", ["t-" + sfx]), job=True)
call("GetNodeStorageUnits", lambda: c.GetNodeStorageUnits("node21", "file", "name,size,free"), job=True)
call("ModifyNodeStorageUnits", lambda: c.ModifyNodeStorageUnits("node21", "lvm-pv", "/dev/nonexistent", allocatable=True), job=True)
call("RepairNodeStorageUnits", lambda: c.RepairNodeStorageUnits("node21", "lvm-vg", "nonexistent"), job=True)

# Groups.
call("CreateGroup", lambda: c.CreateGroup(group, alloc_policy="preferred"), job=True)
call("GetGroups", lambda: c.GetGroups(bulk=True))
call("GetGroup", lambda: c.GetGroup(group))
call("ModifyGroup", lambda: c.ModifyGroup(group, alloc_policy="last_resort"), job=True)
call("GetGroupTags", lambda: c.GetGroupTags(group))
call("AddGroupTags", lambda: c.AddGroupTags(group, ["t-" + sfx]), job=True)
call("DeleteGroupTags", lambda: c.DeleteGroupTags(group, ["t-" + sfx]), job=True)
call("AssignGroupNodes", lambda: c.AssignGroupNodes(group, ["node22"], dry_run=True), job=True)
call("RenameGroup", lambda: c.RenameGroup(group, group + "r"), job=True)
call("DeleteGroup", lambda: c.DeleteGroup(group + "r"), job=True)

# Networks.
call("CreateNetwork", lambda: c.CreateNetwork(net, "10.%d.0.0/24" % octet, gateway="10.%d.0.1" % octet), job=True)
call("GetNetworks", lambda: c.GetNetworks(bulk=True))
call("GetNetwork", lambda: c.GetNetwork(net))
call("ModifyNetwork", lambda: c.ModifyNetwork(net, add_reserved_ips=["10.%d.0.9" % octet]), job=True)
call("ConnectNetwork", lambda: c.ConnectNetwork(net, "default", "bridged", "br-" + sfx), job=True)
call("GetNetworkTags", lambda: c.GetNetworkTags(net))
call("AddNetworkTags", lambda: c.AddNetworkTags(net, ["t-" + sfx]), job=True)
call("DeleteNetworkTags", lambda: c.DeleteNetworkTags(net, ["t-" + sfx]), job=True)
call("DisconnectNetwork", lambda: c.DisconnectNetwork(net, "default"), job=True)
call("DeleteNetwork", lambda: c.DeleteNetwork(net), job=True)

# Job filters: one that accepts what it matches changes nothing.
uuid = call("AddFilter", lambda: c.AddFilter(90000, [["jobid", [">", "id", 1000000000]]], "ACCEPT", []))
call("GetFilters", lambda: c.GetFilters(bulk=True))
if uuid:
    call("GetFilter", lambda: c.GetFilter(uuid))
    call("ReplaceFilter", lambda: c.ReplaceFilter(uuid, 90001, [["jobid", [">", "id", 1000000000]]], "ACCEPT", []))
    call("DeleteFilter", lambda: c.DeleteFilter(uuid))
else:
    for m in ("GetFilter", "ReplaceFilter", "DeleteFilter"):
        call(m, lambda: c.GetFilter("00000000-0000-0000-0000-000000000000"))

# Instances.
call("InstanceAllocation", lambda: c.InstanceAllocation("create", inst2, "plain", [{"size": 256}], [],
                                                          os="debian", beparams={"memory": 64}))
call("CreateInstance", lambda: c.CreateInstance("create", inst, "drbd", [{"size": 512}], [{}],
                                                os="debian", pnode="node21", snode="node22",
                                                beparams={"memory": 128}), job=True)
call("InstancesMultiAlloc", lambda: c.InstancesMultiAlloc([results.get("InstanceAllocation") or {}]), job=True)
call("GetInstances", lambda: c.GetInstances(bulk=True))
call("GetInstance", lambda: c.GetInstance(inst))
call("GetInstanceInfo", lambda: c.GetInstanceInfo(inst, static=False), job=True)
call("GetInstanceConsole", lambda: c.GetInstanceConsole(inst))
call("GetInstanceTags", lambda: c.GetInstanceTags(inst))
call("AddInstanceTags", lambda: c.AddInstanceTags(inst, ["t-" + sfx]), job=True)
call("DeleteInstanceTags", lambda: c.DeleteInstanceTags(inst, ["t-" + sfx]), job=True)
call("ModifyInstance", lambda: c.ModifyInstance(inst, beparams={"memory": 192}), job=True)
call("ShutdownInstance", lambda: c.ShutdownInstance(inst, dry_run=True), job=True)
call("StartupInstance", lambda: c.StartupInstance(inst), job=True)
call("RebootInstance", lambda: c.RebootInstance(inst, reboot_type="soft"), job=True)
call("ReinstallInstance", lambda: c.ReinstallInstance(inst, os="debian"), job=True)
call("ActivateInstanceDisks", lambda: c.ActivateInstanceDisks(inst), job=True)
call("GrowInstanceDisk", lambda: c.GrowInstanceDisk(inst, 0, 128), job=True)
call("ReplaceInstanceDisks", lambda: c.ReplaceInstanceDisks(inst), job=True)
call("MigrateInstance", lambda: c.MigrateInstance(inst), job=True)
call("FailoverInstance", lambda: c.FailoverInstance(inst), job=True)
call("MigrateNode", lambda: c.MigrateNode("node21", dry_run=True), job=True)
call("EvacuateNode", lambda: c.EvacuateNode("node22", dry_run=True, mode="secondary-only", iallocator="hail"), job=True)
# Deactivating and re-creating disks and renaming need the instance down.
call("ShutdownInstance", lambda: c.ShutdownInstance(inst, timeout=30), job=True)
call("DeactivateInstanceDisks", lambda: c.DeactivateInstanceDisks(inst), job=True)
call("RecreateInstanceDisks", lambda: c.RecreateInstanceDisks(inst), job=True)
call("PrepareExport", lambda: c.PrepareExport(inst, "remote"), job=True)
call("ExportInstance", lambda: c.ExportInstance(inst, "local", "node21"), job=True)
call("RenameInstance", lambda: c.RenameInstance(inst, inst + "r", ip_check=False, name_check=False), job=True)
call("DeleteInstance", lambda: c.DeleteInstance(inst + "r"), job=True)
call("PowercycleNode", lambda: c.PowercycleNode("node22", force=True, reason="every method") and None)

# Jobs.
jobs = call("GetJobs", lambda: c.GetJobs(bulk=True)) or []
jid = jobs[-1]["id"] if jobs else 1
call("GetJobStatus", lambda: c.GetJobStatus(jid))
call("WaitForJobChange", lambda: c.WaitForJobChange(jid, ["status"], None, None))
call("WaitForJobCompletion", lambda: c.WaitForJobCompletion(jid, period=0.1, retries=10))
call("CancelJob", lambda: c.CancelJob(jid))

for name, _ in inspect.getmembers(rc.GanetiRapiClient, inspect.isfunction):
    if not name.startswith("_") and name not in called:
        print("MISSING", name)
