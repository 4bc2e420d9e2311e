#!/usr/bin/env bash
# Gather the shards' run folders from the reports volume and merge them into one result.
#
#   deploy/k8s/gather.sh [OUT_DIR]      (default: ./reports/k8s-merged)
#
# Waits for the Job, starts a short-lived pod that mounts the reports PVC, copies
# /reports/shard-* out with `kubectl cp`, and runs `tickswarm merge` locally. The exit code
# is the merged verdict (0 pass, 1 a threshold failed).
set -euo pipefail
out=${1:-reports/k8s-merged}
ns=${NAMESPACE:-default}
job=${JOB:-tickswarm}
pvc=${PVC:-tickswarm-reports}
work=$(mktemp -d)
trap 'kubectl -n "$ns" delete pod tickswarm-gather --ignore-not-found --wait=false >/dev/null; rm -rf "$work"' EXIT

# A shard that failed its thresholds (exit 1) still wrote its folder: wait for the Job to end
# either way (Complete, or Failed when an index failed).
until kubectl -n "$ns" get "job/$job" \
  -o jsonpath='{range .status.conditions[*]}{.type}={.status}{"\n"}{end}' \
  | grep -Eq '^(Complete|Failed)=True$'; do
  sleep 10
done

kubectl -n "$ns" run tickswarm-gather --restart=Never --image=busybox:stable \
  --overrides="{\"spec\":{\"volumes\":[{\"name\":\"r\",\"persistentVolumeClaim\":{\"claimName\":\"$pvc\"}}],\"containers\":[{\"name\":\"g\",\"image\":\"busybox:stable\",\"command\":[\"sleep\",\"600\"],\"volumeMounts\":[{\"name\":\"r\",\"mountPath\":\"/reports\"}]}]}}"
kubectl -n "$ns" wait --for=condition=ready --timeout=2m pod/tickswarm-gather

shards=$(kubectl -n "$ns" exec tickswarm-gather -- sh -c 'ls -d /reports/shard-*')
dirs=()
for s in $shards; do
  name=$(basename "$s")
  kubectl -n "$ns" cp "tickswarm-gather:$s" "$work/$name"
  dirs+=("$work/$name")
done
echo "gathered ${#dirs[@]} shards: ${dirs[*]}"
tickswarm merge "${dirs[@]}" --out "$out" --force
