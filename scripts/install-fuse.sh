#!/bin/sh
# Install the Debian packages behind the power-loss harness (tools/powercut):
# fuse3 (fusermount3, and libfuse3 which mfusepy loads through ctypes; mfusepy
# itself is a pure-Python pip package in the test extras, so nothing is
# compiled).  Without root: a loud notice; the power-loss tests then FAIL, as a
# machine that cannot simulate power loss must not pass them.
set -eu
exec "$(dirname "$0")/apt-install.sh" "the power-loss harness's packages" \
  "The power-loss tests (tests/powerloss) will FAIL." \
  fuse3
