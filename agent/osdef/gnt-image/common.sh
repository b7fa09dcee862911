# gnt-image: shared by the scripts. Writes a marker block at the start of
# the instance's first disk: what a guest booted from kernel_path/initrd_path
# (or a test) reads to see that the OS was installed, and with what.
set -eu

usage() {
  echo "usage: $0 (run by gntd with Ganeti's OS API environment; see docs/os.md)" >&2
  exit 1
}
case "${1:-}" in -h|--help) usage ;; esac

# write_marker writes the marker over the first 64 KiB of DISK_0_PATH,
# keeping the rest of the disk (and its size) as it is.
write_marker() {
  if [ "${DISK_COUNT:-0}" -eq 0 ]; then
    echo "gnt-image: instance $INSTANCE_NAME has no disk; nothing to write"
    return 0
  fi
  if [ -z "${DISK_0_PATH:-}" ]; then
    echo "gnt-image: disk 0 has no path on this node (DISK_0_PATH unset)" >&2
    exit 1
  fi
  tmp=$(mktemp)
  trap 'rm -f "$tmp"' EXIT
  {
    echo "GNT-IMAGE 1"
    echo "instance=$INSTANCE_NAME"
    echo "os=$INSTANCE_OS"
    echo "variant=${OS_VARIANT:-}"
    echo "reinstall=${INSTANCE_REINSTALL:-0}"
    echo "label=${OSP_LABEL:-}"
    echo "--- environment ---"
    env | LC_ALL=C sort
    echo "--- end ---"
  } | head -c 65535 > "$tmp"
  # Pad to 64 KiB so that an older, longer marker leaves no tail behind.
  size=$(wc -c < "$tmp")
  head -c $((65536 - size)) /dev/zero >> "$tmp"
  dd if="$tmp" of="$DISK_0_PATH" bs=65536 count=1 conv=notrunc status=none
}
