#!/bin/bash
# Checks deploy/: the systemd unit (systemd-analyze verify where available), the Kubernetes
# manifests (valid YAML and the fields gyre relies on), the sbatch script and the Dockerfile.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
d=$root/deploy
fail() {
  echo "FAIL [deploy]: $*" >&2
  exit 1
}

unit=$d/systemd/gyred@.service
[ -f "$unit" ] || fail "no $unit"
for key in 'Restart=on-failure' 'RuntimeDirectory=gyre/rank%i' 'Environment=GYRE_RANK=%i' \
  'PrivateTmp=no'; do
  grep -qx "$key" "$unit" || fail "gyred@.service lacks '$key'"
done
if command -v systemd-analyze >/dev/null; then
  # Verified under a scratch copy whose ExecStart exists here; an uninstalled gyred and a
  # missing gyre user are the only complaints allowed.
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  sed 's|/usr/bin/gyred|/bin/true|' "$unit" >"$tmp/gyred@.service"
  out=$(systemd-analyze verify "$tmp/gyred@.service" 2>&1 | grep -v -e 'Failed to resolve user' \
    -e 'EnvironmentFile' -e '^$' || true)
  [ -z "$out" ] || fail "systemd-analyze verify: $out"
else
  echo "deploy: no systemd-analyze; unit checked by its keys only"
fi

python3 - "$d/k8s/gyre-job.yaml" <<'PY' || fail "Kubernetes manifests"
import sys
try:
    import yaml
except ImportError:
    print("deploy: no python3-yaml; Kubernetes manifests not parsed")
    sys.exit(0)
docs = {d["kind"]: d for d in yaml.safe_load_all(open(sys.argv[1]))}
svc, job = docs["Service"], docs["Job"]
assert svc["spec"]["clusterIP"] == "None", "the Service must be headless"
assert svc["spec"]["publishNotReadyAddresses"] is True, "publishNotReadyAddresses must be true"
spec = job["spec"]
assert spec["completionMode"] == "Indexed", "the Job must be Indexed"
assert spec["completions"] == spec["parallelism"], "every pod must run at once"
pod = spec["template"]["spec"]
assert pod["subdomain"] == svc["metadata"]["name"], "pods must be in the Service's subdomain"
assert svc["spec"]["selector"]["job-name"] == job["metadata"]["name"]
cmd = " ".join(pod["containers"][0]["command"])
assert "--node_rank \"$JOB_COMPLETION_INDEX\"" in cmd, "node rank must come from the index"
store = "tcp://%s-0.%s:" % (job["metadata"]["name"], svc["metadata"]["name"])
assert store in cmd, "the store must be pod 0 (%s)" % store
assert ("--nnodes %d" % spec["completions"]) in cmd, "--nnodes must equal completions"
assert pod["securityContext"]["runAsNonRoot"] is True
print("deploy: Kubernetes manifests ok")
PY

sb=$d/slurm/run.sbatch
bash -n "$sb" || fail "run.sbatch does not parse"
grep -q '^#SBATCH --nodes=' "$sb" || fail "run.sbatch names no node count"
grep -q 'srun .*gyred' "$sb" || fail "run.sbatch does not start gyred with srun"

df=$d/docker/Dockerfile
[ "$(grep -c '^FROM ' "$df")" -ge 2 ] || fail "the Dockerfile is not multi-stage"
grep -q '^USER gyre' "$df" || fail "the Dockerfile does not switch to a non-root user"
grep -q '^ENTRYPOINT \["/usr/bin/tini", "--"\]' "$df" || fail "no init process as PID 1"
echo "PASS [deploy]"
