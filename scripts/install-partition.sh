#!/bin/sh
# Install what the partition suite (tools/partitions, docs/partitions.md) needs:
# iproute2 (ip netns, veth, bridge, tc), nftables (silent drops) and libfaketime
# (Debian faketime, clock jumps).  Without root: a loud notice; the partition test
# then FAILS (it never skips).
set -eu
exec "$(dirname "$0")/apt-install.sh" "the partition suite's tools" \
  "The partition test (tests/partitions) will FAIL (it never skips)." \
  iproute2 nftables faketime libfaketime
