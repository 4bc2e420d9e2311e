# Sourced by scripts/check_container.sh and scripts/check_ci_examples.sh: which container
# engine to drive, and how.
#
# select_engine DIR
#   Sets ENGINE to `docker` when a Docker daemon answers, otherwise to `podman` (daemonless;
#   scripts/install-test-deps.sh installs it, and runc). For podman it
#   writes DIR/containers.conf and exports CONTAINERS_CONF: this machine's kernel mounts
#   cgroups v1 beside an empty v2 hierarchy ("hybrid"), which crun refuses, and its sandbox
#   may not raise RLIMIT_NPROC, so runc with cgroupfs and limits the sandbox allows. Host
#   networking: the checks talk over loopback only.
select_engine() {
    local dir=$1
    if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
        ENGINE=docker
        return
    fi
    ENGINE=podman
    cat >"$dir/containers.conf" <<CONF
[containers]
default_ulimits = ["nproc=4096:4096", "nofile=$(ulimit -Hn):$(ulimit -Hn)"]
netns = "host"
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
CONF
    export CONTAINERS_CONF="$dir/containers.conf"
}
