#!/bin/sh
# mkguest.sh OUTDIR: builds OUTDIR/initramfs.cpio.gz, a test guest's
# initramfs from Debian's busybox-static: its /init prints the marker and
# a counter, "GNT-GUEST-UP <n>", on the serial console every 100 ms (a
# console attached late still sees it; the counter shows the guest going
# on, e.g. across a live migration).
# The tests of the kvm driver boot it with the host's /boot/vmlinuz-*.
set -eu
out=${1:?usage: mkguest.sh OUTDIR}
bb=${BUSYBOX:-/bin/busybox}
if ! ldd "$bb" 2>&1 | grep -q 'not a dynamic'; then
	echo "mkguest: $bb is not a static busybox (apt-get install busybox-static)" >&2
	exit 1
fi
command -v cpio >/dev/null || { echo "mkguest: cpio is missing (apt-get install cpio)" >&2; exit 1; }
mkdir -p "$out"
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/bin" "$root/dev" "$root/proc" "$root/sys"
cp "$bb" "$root/bin/busybox"
ln -s busybox "$root/bin/sh"
# ACPI power button support, so that a graceful stop (QMP system_powerdown)
# powers the guest off: the kernel's button and evdev modules (of the
# newest kernel in /boot, the one the tests boot) and busybox's acpid.
kver=$(ls /boot/vmlinuz-* 2>/dev/null | sort | tail -n1 | sed 's|/boot/vmlinuz-||')
rm -f "$out/acpi"
if [ -n "$kver" ] && [ -f "/lib/modules/$kver/kernel/drivers/acpi/button.ko" ] && [ -f "/lib/modules/$kver/kernel/drivers/input/evdev.ko" ]; then
	mkdir -p "$root/lib/modules" "$root/etc/acpi/PWRF"
	cp "/lib/modules/$kver/kernel/drivers/acpi/button.ko" "/lib/modules/$kver/kernel/drivers/input/evdev.ko" "$root/lib/modules/"
	printf '#!/bin/busybox sh\n/bin/busybox poweroff -f\n' >"$root/etc/acpi/PWRF/00000080"
	chmod 755 "$root/etc/acpi/PWRF/00000080"
	touch "$out/acpi"
fi
# Memory ballooning: the kernel's virtio-balloon driver and what it needs
# (virtio over PCI), loaded in this order, so that QMP balloon moves the
# guest's memory.
rm -f "$out/balloon"
vmods="virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci virtio_balloon"
vdir=/lib/modules/$kver/kernel/drivers/virtio
if [ -n "$kver" ] && (for m in $vmods; do [ -f "$vdir/$m.ko" ] || exit 1; done); then
	mkdir -p "$root/lib/modules/virtio"
	for m in $vmods; do cp "$vdir/$m.ko" "$root/lib/modules/virtio/"; done
	echo "$vmods" >"$root/lib/modules/virtio/order"
	touch "$out/balloon"
fi
cat >"$root/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t devtmpfs dev /dev 2>/dev/null
if [ -f /lib/modules/button.ko ]; then
	/bin/busybox insmod /lib/modules/evdev.ko
	/bin/busybox insmod /lib/modules/button.ko
	/bin/busybox acpid -c /etc/acpi -l /dev/null
fi
if [ -f /lib/modules/virtio/order ]; then
	for m in $(/bin/busybox cat /lib/modules/virtio/order); do
		/bin/busybox insmod /lib/modules/virtio/$m.ko 2>/dev/null
	done
fi
n=0
while true; do
	echo "GNT-GUEST-UP $n"
	n=$((n+1))
	/bin/busybox usleep 100000
done
INIT
chmod 755 "$root/init"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$out/initramfs.cpio.gz.tmp"
mv "$out/initramfs.cpio.gz.tmp" "$out/initramfs.cpio.gz"
echo "$out/initramfs.cpio.gz"
