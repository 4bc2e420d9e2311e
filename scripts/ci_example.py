#!/usr/bin/env python3
"""Runs the copy-paste CI examples in docs/ci/ the way their CI systems would, as far as that
can be done on one machine without GitHub or GitLab (scripts/check_ci_examples.sh drives it).

  github WORKFLOW REPO_DIR VAR=VALUE...
      The workflow's first job: its `env:` (with `${{ secrets.X }}` and `${{ vars.X }}` taken
      from the VAR=VALUE pairs; a missing one is empty, as on GitHub), then every `run:` step
      in REPO_DIR with GitHub's default shell (`bash --noprofile --norc -eo pipefail`).
      `uses:` steps are marketplace actions: checkout is REPO_DIR itself, cache is skipped, and
      for upload-artifact and action-junit-report the paths they name must exist afterwards.
  gitlab PIPELINE REPO_DIR ENGINE VAR=VALUE...
      The pipeline's first job in its `image:` with ENGINE (docker or podman), as GitLab's
      Docker executor runs it: the project folder mounted and writable by any uid (the
      runner's umask 0000), CI/CD variables VAR=VALUE, the job's `variables:` expanded from
      them, the `entrypoint:` override, and the `script:` lines in one `sh -e` script. Then
      `artifacts.paths` and `artifacts.reports.junit` must exist.

  k8s JOB_YAML CONFIGMAP_YAML ENGINE IMAGE REPORTS_DIR VAR=VALUE...
      deploy/k8s's Indexed Job as Kubernetes would start it, one container per completion
      index, all at once: the container's args and env (`value`, `$(VAR)` references to
      earlier entries, `secretKeyRef` from `secret/NAME/KEY=VALUE` pairs, the
      completion-index annotation, JOB_COMPLETION_INDEX), runAsUser/fsGroup, the ConfigMap's
      data as files at its mount, REPORTS_DIR as the PVC's mount. IMAGE replaces the
      manifest's placeholder image. Other pairs are added to the env (test-size overrides).
      Exit status: the highest of the pods' exit codes.

Exit status: the job's (0 when every step passed), or 4 when the example itself is unusable
(a step shape this runner does not know, an artifact path that was not written).
"""

import os
import re
import subprocess
import sys

from ruamel.yaml import YAML


def load(path):
    with open(path, encoding="utf-8") as f:
        return YAML(typ="safe").load(f)


def pairs(args):
    out = {}
    for a in args:
        key, sep, value = a.partition("=")
        if not sep:
            sys.exit(f"ci_example: expected VAR=VALUE, got {a!r}")
        out[key] = value
    return out


def unusable(msg):
    print(f"ci_example: the example is unusable: {msg}", file=sys.stderr)
    sys.exit(4)


GH_EXPR = re.compile(r"\$\{\{\s*(secrets|vars)\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def github_value(text, given):
    """`${{ secrets.X }}` / `${{ vars.X }}` from the given pairs; anything else is refused."""
    text = GH_EXPR.sub(lambda m: given.get(m.group(2), ""), str(text))
    if "${{" in text:
        unusable(f"expression this runner does not evaluate: {text}")
    return text


def github(workflow, repo, given):
    doc = load(workflow)
    jobs = doc.get("jobs") or {}
    if not jobs:
        unusable("no jobs")
    name, job = next(iter(jobs.items()))
    env = dict(os.environ)
    for key, value in (job.get("env") or {}).items():
        env[key] = github_value(value, given)
    failed = False
    job_rc = 0
    for i, step in enumerate(job.get("steps") or []):
        label = step.get("name") or step.get("uses") or f"step {i + 1}"
        always = str(step.get("if", "")).strip() == "always()"
        if failed and not always:
            print(f"ci_example: [{name}] skipped after a failure: {label}")
            continue
        if "run" in step:
            print(f"ci_example: [{name}] run: {label}", flush=True)
            rc = subprocess.run(
                ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
                cwd=repo,
                env=env,
            ).returncode
            if rc != 0:
                print(f"ci_example: [{name}] step failed with exit {rc}: {label}")
                failed = True
                job_rc = rc
            continue
        action = str(step.get("uses", "")).split("@")[0]
        with_ = step.get("with") or {}
        if action == "actions/checkout":
            print(f"ci_example: [{name}] checkout: the repository is {repo}")
        elif action == "actions/cache":
            print(f"ci_example: [{name}] cache: skipped (a first run, nothing cached)")
        elif action == "actions/upload-artifact":
            path = os.path.join(repo, github_value(with_.get("path", ""), given))
            if not os.path.exists(path):
                unusable(f"upload-artifact path {path} was not written")
            print(f"ci_example: [{name}] upload-artifact: {path} exists")
        elif action == "mikepenz/action-junit-report":
            path = os.path.join(repo, github_value(with_.get("report_paths", ""), given))
            if not os.path.isfile(path):
                unusable(f"junit report {path} was not written")
            print(f"ci_example: [{name}] junit report: {path} exists")
        else:
            unusable(f"action {action} is not known to this runner")
    return job_rc


GL_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def gitlab_value(text, given):
    """GitLab expands `$X` / `${X}` in variables and image names from the CI/CD variables."""
    return GL_VAR.sub(lambda m: given.get(m.group(1) or m.group(2), ""), str(text))


def gitlab(pipeline, repo, engine, given):
    doc = load(pipeline)
    jobs = {k: v for k, v in doc.items() if isinstance(v, dict) and "script" in v}
    if not jobs:
        unusable("no job with a script")
    name, job = next(iter(jobs.items()))
    image = job.get("image")
    entrypoint = None
    if isinstance(image, dict):
        entrypoint = image.get("entrypoint")
        image = image.get("name")
    if not image:
        unusable("the job names no image")
    image = gitlab_value(image, given)
    variables = dict(given)
    for key, value in (job.get("variables") or {}).items():
        variables[key] = gitlab_value(value, given)
    # The runner clones with umask 0000, so a non-root image can write the project folder.
    for root, dirs, files in os.walk(repo):
        for d in dirs:
            os.chmod(os.path.join(root, d), 0o777)
        os.chmod(root, 0o777)
    project = "/builds/project"
    cmd = [engine, "run", "--rm", "--network", "host", "-v", f"{repo}:{project}", "-w", project]
    if entrypoint is not None:
        cmd += ["--entrypoint", " ".join(entrypoint)]
    for key, value in variables.items():
        cmd += ["-e", f"{key}={value}"]
    cmd += ["-e", f"CI_PROJECT_DIR={project}", image, "sh", "-e", "-c"]
    cmd.append("\n".join(str(line) for line in job["script"]))
    print(f"ci_example: [{name}] script in {image} ({len(job['script'])} lines)", flush=True)
    rc = subprocess.run(cmd).returncode
    print(f"ci_example: [{name}] job exit {rc}")
    artifacts = job.get("artifacts") or {}
    for path in artifacts.get("paths") or []:
        full = os.path.join(repo, path)
        if not os.path.exists(full):
            unusable(f"artifact path {full} was not written")
        print(f"ci_example: [{name}] artifact {path} exists")
    junit = (artifacts.get("reports") or {}).get("junit")
    if junit:
        full = os.path.join(repo, junit)
        if not os.path.isfile(full):
            unusable(f"junit report {full} was not written")
        print(f"ci_example: [{name}] junit report {junit} exists")
    return rc


K8S_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def k8s(job_yaml, configmap_yaml, engine, image, reports, given):
    with open(job_yaml, encoding="utf-8") as f:
        docs = [d for d in YAML(typ="safe").load_all(f) if d]
    job = next((d for d in docs if d.get("kind") == "Job"), None)
    if job is None:
        unusable("no Job in " + job_yaml)
    spec = job["spec"]
    if spec.get("completionMode") != "Indexed":
        unusable("the Job is not an Indexed Job")
    pod = spec["template"]["spec"]
    security = pod.get("securityContext") or {}
    (container,) = pod["containers"]
    volumes = {v["name"]: v for v in pod.get("volumes") or []}

    with open(configmap_yaml, encoding="utf-8") as f:
        configmap = YAML(typ="safe").load(f)
    scenario_dir = reports.rstrip("/") + "-configmap"
    os.makedirs(scenario_dir, exist_ok=True)
    for name, body in (configmap.get("data") or {}).items():
        with open(os.path.join(scenario_dir, name), "w", encoding="utf-8") as out:
            out.write(body)

    uid = security.get("runAsUser")
    gid = security.get("fsGroup", uid)
    mounts = []
    for m in container.get("volumeMounts") or []:
        vol = volumes[m["name"]]
        if "configMap" in vol:
            if vol["configMap"]["name"] != configmap["metadata"]["name"]:
                unusable(f"volume {m['name']} names another ConfigMap")
            mounts += ["-v", f"{scenario_dir}:{m['mountPath']}:ro"]
        elif "persistentVolumeClaim" in vol:
            # fsGroup makes the volume the pods' group's.
            if gid is not None:
                os.chown(reports, 0, gid)
                os.chmod(reports, 0o2775)
            mounts += ["-v", f"{reports}:{m['mountPath']}"]
        else:
            unusable(f"volume kind of {m['name']} is not known to this runner")

    secrets = {k: v for k, v in given.items() if k.startswith("secret/")}
    extra = {k: v for k, v in given.items() if not k.startswith("secret/")}
    pods = []
    for index in range(int(spec["completions"])):
        env = {"JOB_COMPLETION_INDEX": str(index)}
        for e in container.get("env") or []:
            if "value" in e:
                value = K8S_REF.sub(lambda m: env.get(m.group(1), m.group(0)), str(e["value"]))
            else:
                src = e["valueFrom"]
                if "secretKeyRef" in src:
                    ref = src["secretKeyRef"]
                    key = f"secret/{ref['name']}/{ref['key']}"
                    if key not in secrets:
                        unusable(f"no value given for {key}")
                    value = secrets[key]
                elif src.get("fieldRef", {}).get("fieldPath") == (
                    "metadata.annotations['batch.kubernetes.io/job-completion-index']"
                ):
                    value = str(index)
                else:
                    unusable(f"env source of {e['name']} is not known to this runner")
            env[e["name"]] = value
        env.update(extra)
        cmd = [engine, "run", "--rm", "--network", "host"]
        if uid is not None:
            cmd += ["--user", f"{uid}:{gid}"]
        cmd += mounts
        for key, value in env.items():
            cmd += ["-e", f"{key}={value}"]
        cmd += [image] + [str(a) for a in container.get("args") or []]
        print(f"ci_example: [job/{job['metadata']['name']}] pod index {index}: "
              f"TICKSWARM_OUT={env.get('TICKSWARM_OUT')}", flush=True)
        pods.append(subprocess.Popen(cmd))
    codes = [p.wait() for p in pods]
    print(f"ci_example: [job/{job['metadata']['name']}] pod exit codes {codes}")
    return max(codes)


def main(argv):
    if len(argv) >= 3 and argv[0] == "github":
        return github(argv[1], argv[2], pairs(argv[3:]))
    if len(argv) >= 4 and argv[0] == "gitlab":
        return gitlab(argv[1], argv[2], argv[3], pairs(argv[4:]))
    if len(argv) >= 6 and argv[0] == "k8s":
        return k8s(argv[1], argv[2], argv[3], argv[4], argv[5], pairs(argv[6:]))
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
