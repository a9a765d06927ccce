#!/usr/bin/env bash
# The chaos suite's network: one namespace per server (PREFIX-n1..n3), one for the clients
# (PREFIX-cl) and one holding the bridge (PREFIX-br). Each of the four is joined to the bridge by
# a veth pair (eth0 inside, b<name> on the bridge); addresses 10.231.0.1-3 (servers) and
# 10.231.0.100 (clients). Nothing is added to the root namespace.
#   netns.sh up PREFIX     create (fails if PREFIX-* exists)
#   netns.sh down PREFIX   delete everything PREFIX-* (idempotent; deleting a namespace deletes
#                          its veth ends)
set -euo pipefail
cmd=${1:?up|down}; p=${2:?prefix}
case $cmd in
up)
  ip netns add "$p-br"
  ip -n "$p-br" link add br0 type bridge
  ip -n "$p-br" link set br0 up
  ip -n "$p-br" link set lo up
  for spec in n1:1 n2:2 n3:3 cl:100; do
    name=${spec%%:*}; last=${spec##*:}
    ip netns add "$p-$name"
    ip -n "$p-br" link add "b$name" type veth peer name eth0 netns "$p-$name"
    ip -n "$p-br" link set "b$name" master br0 up
    ip -n "$p-$name" addr add "10.231.0.$last/24" dev eth0
    ip -n "$p-$name" link set eth0 up
    ip -n "$p-$name" link set lo up
  done
  ;;
down)
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^$p-(br|n1|n2|n3|cl)\$" || true); do
    ip netns del "$ns" || true
  done
  ;;
*) echo "usage: $0 up|down PREFIX" >&2; exit 2 ;;
esac
