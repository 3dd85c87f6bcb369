# Helpers of the tests that run nodes in Linux network namespaces (netns_cli.sh,
# leader_restart_cli.sh). Sourced (bash); the caller sets $tag (the prefix of its namespaces'
# names) and $work.

# in_ns NS COMMAND...: COMMAND in the network namespace ${tag}NS. `ip netns exec` and `ip -n`
# also remount / and /sys (which fails in a chroot); entering only the network namespace is all
# a command here needs.
in_ns() { local ns=$1; shift; nsenter --net=/var/run/netns/${tag}$ns "$@"; }

# set_up_or_skip FUNCTION: runs FUNCTION, which builds the "hosts" and, where the kernel or the
# sandbox does not allow a step (no namespaces, no veth, no tbf), says which step and returns 1;
# the test is then skipped (exit 77), naming the step.
set_up_or_skip() {
  local what
  if ! what=$("$1" 2>"$work/setup.txt"); then
    echo "skipped: cannot set up $what here: $(head -c 300 "$work/setup.txt")"
    exit 77
  fi
}
