package agent

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// Real gntd processes driving real DRBD 8.4. One kernel cannot host two
// nodes' drbd devices (each node's first disk is minor 0), so
// TestDRBDClusterInGuests boots two test guests (kvm_lvmguest_test.go),
// each a node: its own kernel with the drbd module, drbd-utils' 8.4
// tools, LVM, a volume group on a blank virtio disk, qemu for the nested
// instance, and gntd and gnt (built statically from ./cmd). A virtio NIC
// each, linked by QEMU's UDP socket netdev on the host's loopback, is
// their private network (10.99.0.1 and .2). Guest B's init only serves a
// shell on that network (busybox nc); guest A's init runs the scenario
// (drbdClusterScript) with the gnt CLI, asking B through that shell for
// its /proc/drbd, its volumes and its qemu.

// The cluster's nodes: their names and addresses on the guests' network.
const (
	drbdClusterNet = "10.99.0"
	// drbdClusterShell is the port of guest B's shell.
	drbdClusterShell = "7001"
)

// drbdClusterTools are written by both guests' inits: start-gntd NAME IP
// runs the node's gntd in the background (kvm driver under TCG, the
// volume group gntvg, joining A's gntd; its log in /tmp/gntd.log; its
// boot id read from /run/gnt-boot-id, the kernel's at first, which the
// scenario renews to stand for a reboot), and qemu-drbd prints the pids
// of the qemus that have a drbd device open.
const drbdClusterTools = `mkdir -p /var/lib/gnt /root /usr/local/bin
cat /proc/sys/kernel/random/boot_id > /run/gnt-boot-id
cat > /usr/local/bin/start-gntd <<'EOF'
#!/bin/sh
setsid /usr/bin/gntd agent --name "$1" --bind "$2" --data-dir /var/lib/gnt --profile dev --log-level info \
	--hypervisor kvm --kvm-accel tcg --volume-group gntvg --boot-id-file /run/gnt-boot-id \
	--join ` + drbdClusterNet + `.1:5080 </dev/null >>/tmp/gntd.log 2>&1 &
EOF
cat > /usr/local/bin/qemu-drbd <<'EOF'
#!/bin/sh
for p in $(pidof qemu-system-x86_64); do
	ls -l /proc/$p/fd 2>/dev/null | grep -q ' /dev/drbd' && echo $p
done
true
EOF
chmod 755 /usr/local/bin/start-gntd /usr/local/bin/qemu-drbd
export PATH=$PATH:/usr/local/bin HOME=/root
`

// drbdClusterNode sets up guest n's end of the private network (eth0,
// the only NIC).
func drbdClusterNode(n int) string {
	return fmt.Sprintf(`ip link set eth0 up || fail "ip link set eth0 up"
ip addr add %s.%d/24 dev eth0 || fail "ip addr add"
`, drbdClusterNet, n)
}

// drbdClusterB is guest B's part: a shell for guest A on its network,
// one per connection (A sends commands and "exit").
const drbdClusterB = `echo "GNT-GUEST node B up"
nc -ll -p ` + drbdClusterShell + ` -e /bin/sh
fail "nc on port ` + drbdClusterShell + ` stopped"
`

// drbdClusterScript is guest A's part: the scenario, each step through
// the gnt CLI against the real gntds, checked on both nodes. Any failure
// prints a GNT-GUEST FAIL line with both gntds' logs' ends.
const drbdClusterScript = `B=` + drbdClusterNet + `.2
onb() { printf 'exec 2>&1\nexport PATH=$PATH:/usr/local/bin HOME=/root\n%s\nexit\n' "$*" | nc $B ` + drbdClusterShell + `; }
fail() {
	echo "GNT-GUEST FAIL $*"
	echo "---- gntd log of nodea"; tail -n 60 /tmp/gntd.log
	echo "---- gntd log of nodeb"; onb tail -n 60 /tmp/gntd.log
	echo "GNT-GUEST RESULT 1"; poweroff -f
}
began=$(date +%s)
step() { echo "GNT-STEP [$(($(date +%s)-began))s] $*"; }
# retry N WHAT CMD...: runs CMD every 2 seconds until it succeeds, at
# most N times.
retry() {
	n=$1 what=$2; shift 2
	i=0
	until "$@"; do
		i=$((i+1)); [ $i -ge $n ] && fail "$what"
		sleep 2
	done
}
# g runs gnt, printing its output, and fails unless it succeeds.
g() {
	echo "# gnt $*"
	gnt "$@" || fail "gnt $*"
}
retry 60 "node B's shell does not answer" onb true
step "node B answers"

start-gntd nodea ` + drbdClusterNet + `.1
listening() { netstat -ltn | grep -q " ` + drbdClusterNet + `.1:5080 "; }
retry 60 "nodea's gntd does not listen on :5080" listening
g --server ` + drbdClusterNet + `.1:5080 cluster init --candidate-pool-size 1 gnt-drbd.example
g cluster issue-client-cert --data-dir /var/lib/gnt
echo ` + drbdClusterNet + `.1:5080 > /root/.config/gnt/servers
onb "mkdir -p /var/lib/gnt; echo $(base64 /var/lib/gnt/cluster.key | tr -d '\n') | base64 -d > /var/lib/gnt/cluster.key; chmod 600 /var/lib/gnt/cluster.key"
g node add --primary-ip $B --master-candidate no nodeb
onb start-gntd nodeb $B
reported() { gnt node list --no-headers --separator '|' --fields name,bootid | grep -c '|[0-9a-f-]\{36\}$' | grep -q '^2$'; }
retry 60 "both nodes' agents do not report" reported
g node list
step "cluster of nodea and nodeb formed"

# drbdstate NODE-COMMAND ROLES: the one device of the node is Connected,
# with roles ROLES, both disks UpToDate.
drbdstate() {
	p=$($1 cat /proc/drbd)
	echo "$p"
	echo "$p" | grep -q "cs:Connected ro:$2 ds:UpToDate/UpToDate"
}
ona() { "$@"; }
checkdrbd() {
	drbdstate ona $1 || fail "nodea's /proc/drbd: not Connected $1 UpToDate/UpToDate"
	drbdstate onb $2 || fail "nodeb's /proc/drbd: not Connected $2 UpToDate/UpToDate"
}
# runs NODE: the instance's qemu runs on NODE, with its drbd device open,
# and on no other.
runs() {
	qa=$(qemu-drbd) qb=$(onb qemu-drbd)
	case $1 in
	nodea) [ -n "$qa" ] && [ -z "$qb" ] ;;
	nodeb) [ -z "$qa" ] && [ -n "$qb" ] ;;
	esac || fail "qemu with a drbd device open on nodea: '$qa', on nodeb: '$qb'; want it on $1 only"
	[ "$(gnt instance list --no-headers --fields pnode vm1)" = $1 ] || fail "vm1's primary node is not $1"
}

g instance add -t drbd -n nodea:nodeb --disk 32M --memory 64M --no-nics --os-type gnt-image+default \
	-H kvm:kernel_path=/boot/vmlinuz,initrd_path=/boot/nested.cpio.gz,kernel_args=quiet,root_path= vm1
step "vm1 added (drbd, 32 MiB, primary nodea), synced and started"
info=$(gnt instance info vm1) || fail "gnt instance info vm1"
echo "$info"
echo "$info" | grep -Eq "drbd: port 1[0-9]{4}, primary nodea minor [0-9]+, secondary nodeb minor [0-9]+" || fail "instance info: no drbd port and minors"
echo "$info" | grep -Eq "on primary: /dev/drbd[0-9]+ \(147:[0-9]+\), in sync, status ok" || fail "instance info: the primary's device is not in sync"
echo "$info" | grep -Eq "on secondary: /dev/drbd[0-9]+ \(147:[0-9]+\), in sync, status ok" || fail "instance info: the secondary's device is not in sync"
checkdrbd Primary/Secondary Secondary/Primary
runs nodea
step "vm1 runs on nodea: Connected, Primary/Secondary, UpToDate on both"

g instance migrate -f vm1
runs nodeb
checkdrbd Secondary/Primary Primary/Secondary
gnt instance info vm1 | grep -Eq "drbd: port 1[0-9]{4}, primary nodeb minor [0-9]+, secondary nodea minor [0-9]+" || fail "instance info after the migration: nodeb is not the drbd primary"
# The OS install wrote gnt-image's marker through nodea's device: nodeb's
# reads it.
m=$(onb 'dd if=/dev/drbd0 bs=4096 count=1 2>/dev/null | head -c 11')
[ "$m" = "GNT-IMAGE 1" ] || fail "nodeb's /dev/drbd0 begins with '$m', not gnt-image's marker written on nodea"
step "vm1 migrated live to nodeb, which reads the marker written on nodea"

g instance grow-disk vm1 0 32M
synced() { drbdstate ona Secondary/Primary >/dev/null && drbdstate onb Primary/Secondary >/dev/null; }
retry 60 "not in sync after grow-disk" synced
for s in $(cat /sys/block/drbd*/size) $(onb 'cat /sys/block/drbd*/size'); do
	[ "$s" = 131072 ] || fail "a drbd device has $s sectors after grow-disk, want 131072 (64 MiB)"
done
checkdrbd Secondary/Primary Primary/Secondary
step "vm1's disk grown to 64 MiB on both nodes"

g instance replace-disks -s vm1
retry 60 "not in sync after replace-disks -s" synced
checkdrbd Secondary/Primary Primary/Secondary
lvs=$(lvm lvs --noheadings --units m --nosuffix -o lv_size gntvg | sort -n | tr -s ' \n' ' ')
[ "$lvs" = " 64.00 128.00 " ] || fail "nodea's volumes after replace-disks -s: '$lvs' MiB, want 64.00 and 128.00 (the old ones removed)"
step "nodea's (the secondary's) storage replaced while vm1 runs on nodeb: in sync again"

g instance failover -f --shutdown-timeout 5 vm1
runs nodea
checkdrbd Primary/Secondary Secondary/Primary
m=$(dd if=/dev/drbd0 bs=4096 count=1 2>/dev/null | head -c 11)
[ "$m" = "GNT-IMAGE 1" ] || fail "nodea's /dev/drbd0 begins with '$m' after the failover, not gnt-image's marker"
step "vm1 failed over to nodea, whose replaced storage reads the marker"

# nodeb "reboots" while vm1 runs on nodea: its drbd device is taken down
# as a reboot leaves it (Unconfigured), and its boot id renewed. The
# leader sees the new boot id at its next storage poll and queues an
# activate-disks job (Ganeti's watcher), which sets nodeb's device up and
# reconnects it: in sync again without an operator.
g cluster modify --diagnose-interval 1s
onb 'for r in $(drbdsetup show | sed -n "s/^resource \([^ ]*\) .*/\1/p"); do drbdsetup down $r; done'
onb cat /proc/drbd | grep -q ' cs:' && fail "nodeb's drbd device is still configured after drbdsetup down"
onb 'cat /proc/sys/kernel/random/uuid > /run/gnt-boot-id'
activated() { gnt job list --no-headers --separator '|' --fields status,summary | grep -q '^success|.*INSTANCE_ACTIVATE_DISKS.*vm1'; }
retry 60 "no successful activation of vm1's disks after nodeb's reboot" activated
synced() { drbdstate ona Primary/Secondary >/dev/null && drbdstate onb Secondary/Primary >/dev/null; }
retry 60 "not in sync after nodeb's reboot" synced
checkdrbd Primary/Secondary Secondary/Primary
gnt job list --no-headers --fields id,status,summary | grep INSTANCE_ACTIVATE_DISKS
step "nodeb rebooted (device down, new boot id): the leader re-activated vm1's disks, in sync again"

g instance shutdown --shutdown-timeout 5 vm1
g instance remove -f vm1
for n in ona onb; do
	lvs=$($n lvm lvs --noheadings -o lv_name gntvg) || fail "$n: lvs"
	[ -z "$lvs" ] || fail "$n: volumes left after remove: $lvs"
	p=$($n cat /proc/drbd)
	echo "$p"
	echo "$p" | grep -q ' cs:' && fail "$n: drbd minors left after remove"
	[ -z "$($n qemu-drbd)" ] || fail "$n: qemu left after remove"
done
step "vm1 removed: no volume, no drbd minor, no qemu on either node"
echo "GNT-GUEST RESULT 0"
poweroff -f
`

// TestDRBDClusterInGuests boots the two guests and fails on any failure
// either prints, or when the scenario has not finished within 8 minutes.
func TestDRBDClusterInGuests(t *testing.T) {
	const what = "the DRBD test of two gntds in two guests"
	meta := needDRBDTools(t, what)
	g := needTestGuest(t, what, "drbd", "dm-mod", "virtio_pci", "virtio_blk", "virtio_net")
	if !g.nested {
		t.Skipf("SKIP: qemu's firmware is missing (see the NOTE above): %s not run", what)
	}
	dir := t.TempDir()
	for _, c := range []string{"gntd", "gnt"} {
		g.goBuild(t, "building "+c, "build", "-o", filepath.Join(dir, c), "github.com/gnt-cluster/gnt/cmd/"+c)
	}
	// The nested instance's initramfs: a busybox printing a counter.
	if out, err := exec.Command("testdata/mkguest.sh", dir).CombinedOutput(); err != nil {
		t.Skipf("SKIP: building the nested guest's initramfs failed (busybox-static, cpio?): %v\n%s: %s not run", err, out, what)
	}
	g.bins = append(g.bins, guestBin{"sbin/drbdsetup", drbdSetup84}, guestBin{"sbin/drbdmeta", meta},
		guestBin{"usr/bin/gntd", filepath.Join(dir, "gntd")}, guestBin{"usr/bin/gnt", filepath.Join(dir, "gnt")})
	g.files = append(g.files, guestBin{"boot/nested.cpio.gz", filepath.Join(dir, "initramfs.cpio.gz")})
	link := guestLink(t)
	head := guestInitHead + "disk /dev/vda gntvg\n" + drbdGuestSetup + drbdClusterTools
	boot := func(n int, part string) guestBoot {
		return guestBoot{init: head + drbdClusterNode(n) + part, disks: 1, diskMiB: 512, memMiB: 1024,
			bound: 8 * time.Minute, qemuArgs: link[n-1]}
	}
	began := time.Now()
	b := g.start(t, boot(2, drbdClusterB), "")
	a := g.start(t, boot(1, drbdClusterScript), "")
	waitGuests(t, boot(1, ""), began, guestConsole{"a", a}, guestConsole{"b", b})
}
