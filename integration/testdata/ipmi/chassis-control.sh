#!/bin/sh
# ipmi_sim's chassis control program for the gnt-oob-ipmi integration
# test: `chassis-control.sh STATEFILE get power` prints power:0|1,
# `... set power 0|1` records it (a power cycle is an off, then an on a
# second later, done by ipmi_sim itself).
state=$1; op=$2; shift 2
case $op in
get)
	for p in "$@"; do
		case $p in
		power) echo "power:$(cat "$state" 2>/dev/null || echo 0)" ;;
		boot) echo "boot:default" ;;
		*) echo "invalid parameter: $p"; exit 1 ;;
		esac
	done ;;
set)
	while [ $# -gt 1 ]; do
		case $1 in
		power) echo "$2" > "$state" ;;
		esac
		shift 2
	done ;;
*) echo "unknown operation: $op"; exit 1 ;;
esac
