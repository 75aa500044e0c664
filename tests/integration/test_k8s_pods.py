"""The containers of configs/k8s/ run as Kubernetes would run them, and their pods form one job. For each example
(Indexed Job + headless Service, JobSet, PyTorchJob) the pods are made from the YAML as its controller makes them, one
network namespace per pod (tests/integration/netns.py), and every pod's container command and args run in it:
  * the pod: the hostname the controller gives it (<job>-<index>, <jobset>-<rjob>-<job>-<index>, <job>-<role>-<i>);
    the environment Kubernetes gives the container (HOSTNAME, the image's PATH and HOME, the YAML's env with
    $(VAR) expanded, then what the controller adds: JOB_COMPLETION_INDEX from the Job controller, or the training
    operator's PET_*, MASTER_*, WORLD_SIZE and RANK, computed as its pkg/controller.v1/pytorch/envvar.go does) and
    nothing else (env -i); the YAML's volumes mounted at their mountPath in the pod's own mount namespace: the Secret
    laid out as the kubelet does (..data links, defaultMode) from `dtrain secret init`, the memory emptyDir as a
    tmpfs of its sizeLimit;
  * the names: /etc/netns/<ns>/hosts (which `ip netns exec` mounts over /etc/hosts) holds the kubelet's lines for
    the pod and what cluster DNS would answer: <hostname>.<service> for a headless Service whose selector matches the
    pod's labels and whose name is the pod's subdomain, JobSet's <hostname>.<jobset>, the operator's per-replica
    Services <job>-<role>-<i>; resolv.conf points at loopback, so no lookup leaves the namespace;
  * checked: every pod exits 0 within 60 s, and the training script (DDP, gloo, 3 steps) ran as one job: ranks
    0..W-1 with W = pods x CPUs, each pod's ranks in its node rank's group (index 0 or the Master is node 0, the
    launcher), equal weights on every rank after the steps, an all_reduce summing every rank, MASTER_ADDR pod 0's
    address, /dev/shm the sizeLimit.
The three examples run side by side, each on 2 network namespaces of its own (hosts 2k and 2k+1 of one Cluster),
with its own results directory: their pods' names, addresses and files are apart, as two jobs in one cluster would be.
Replaced, because they cannot run here: the image (dtrain from this build on PATH, /usr/bin's python3 and torch; the
working directory a fresh directory per pod holding train.py), the GPU resources (ignored: --nproc-per-node auto
starts a worker per CPU where no GPU is), and the cluster's other environment (no KUBERNETES_* service variables, no
API server). Cleanup: namespaces and /etc/netns files (Cluster.close), mount points this test made. Skips (exit 77)
where namespaces cannot be built (not root)."""

import copy
import glob
import json
import os
import re
import shutil
import subprocess
import tempfile
import time

from harness import DTRAIN, SOURCE_DIR, check, describe, finish, write
from netns import ETC_NETNS, Cluster, require_netns

require_netns()
import yaml  # noqa: E402 - after the skip (python3-yaml, scripts/setup.sh --tests)

K8S_DIR = os.path.join(SOURCE_DIR, "configs", "k8s")
WORK = tempfile.mkdtemp(prefix="dtrain-k8s-")     # the test's scratch directory (scratch.py) removes it
RESULTS = os.path.join(WORK, "results")         # <RESULTS>/<example>/ per example
EXAMPLES = ("indexed-job.yaml", "jobset.yaml", "pytorchjob.yaml")
DOMAIN = "default.svc.cluster.local"
IMAGE_PATH = os.path.dirname(DTRAIN) + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
TRAIN = r"""
import json, os, socket
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = DDP(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
gen = torch.Generator().manual_seed(rank)
for _ in range(3):
    loss = model(torch.randn(4, 8, generator=gen)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
total = torch.tensor([float(rank)])
dist.all_reduce(total)
shm = os.statvfs("/dev/shm")
out = {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "GROUP_RANK", "LOCAL_RANK", "MASTER_ADDR")}
out.update(host=socket.gethostname(), sum=total.item(), shm=shm.f_blocks * shm.f_frsize,
           weights=[round(v, 6) for v in model.module.weight.flatten().tolist()])
with open(os.path.join(%r, "%%s-%%s.json" %% (out["host"], out["LOCAL_RANK"])), "w") as f:
    json.dump(out, f)
del model
dist.destroy_process_group()
"""   # % the example's results directory


class Pod:
    """A pod as its controller makes it: hostname, subdomain, labels, spec (the template's), env the controller adds."""

    def __init__(self, hostname, template, labels, added_env, node_rank, subdomain=None):
        self.hostname, self.spec, self.node_rank = hostname, template["spec"], node_rank
        self.subdomain = subdomain or self.spec.get("subdomain")
        self.labels = dict(template.get("metadata", {}).get("labels", {}), **labels)
        self.added_env = added_env
        self.dns = []      # names cluster DNS answers with this pod's address


def job_pods(job_name, job_spec, subdomain=None):
    """An Indexed Job's pods (kubernetes pkg/controller/job: hostname <job>-<index>, JOB_COMPLETION_INDEX, the
    job-name labels)."""
    assert job_spec.get("completionMode") == "Indexed"
    return [Pod("%s-%d" % (job_name, i), job_spec["template"],
                {"job-name": job_name, "batch.kubernetes.io/job-name": job_name,
                 "batch.kubernetes.io/job-completion-index": str(i)},
                [("JOB_COMPLETION_INDEX", str(i))], i, subdomain) for i in range(job_spec["completions"])]


def pods_of(docs):
    pods = []
    for doc in docs:
        name, spec = doc["metadata"]["name"], doc.get("spec", {})
        if doc["kind"] == "Job":
            pods += job_pods(name, spec)
        elif doc["kind"] == "JobSet":
            # JobSet makes the headless Service <subdomain> (default: its name) for its pods' hostnames.
            sub = spec.get("network", {}).get("subdomain") or name
            for rjob in spec["replicatedJobs"]:
                for j in range(rjob.get("replicas", 1)):
                    for p in job_pods("%s-%s-%d" % (name, rjob["name"], j), rjob["template"]["spec"], sub):
                        p.dns.append("%s.%s" % (p.hostname, sub))
                        pods.append(p)
        elif doc["kind"] == "PyTorchJob":
            pods += pytorchjob_pods(name, spec)
    for svc in (d for d in docs if d["kind"] == "Service" and d["spec"].get("clusterIP") == "None"):
        for p in pods:
            if p.subdomain == svc["metadata"]["name"] and svc["spec"]["selector"].items() <= p.labels.items():
                p.dns.append("%s.%s" % (p.hostname, svc["metadata"]["name"]))
    return pods


def pytorchjob_pods(name, spec):
    """training-operator v1.9.0's pods: <job>-<role>-<i>, a Service of that name each, and setPodEnv's variables."""
    specs = spec["pytorchReplicaSpecs"]
    total = sum(r["replicas"] for r in specs.values())
    nproc = spec.get("nprocPerNode")
    port = next(p["containerPort"] for c in specs["Master"]["template"]["spec"]["containers"] if c["name"] == "pytorch"
                for p in c.get("ports", []) if p["name"] == "pytorchjob-port")
    master = "%s-master-0" % name
    pods = []
    for role in ("Master", "Worker"):
        for i in range(specs.get(role, {}).get("replicas", 0)):
            rank = i + (1 if role == "Worker" else 0)
            env = [("PYTHONUNBUFFERED", "1"), ("MASTER_PORT", str(port)), ("PET_MASTER_PORT", str(port)),
                   ("MASTER_ADDR", master), ("PET_MASTER_ADDR", master),
                   ("WORLD_SIZE", str(total * (int(nproc) if str(nproc).isdigit() else 1))), ("RANK", str(rank)),
                   ("PET_NODE_RANK", str(rank))]
            env += [("PET_NPROC_PER_NODE", nproc)] if nproc is not None else []
            env += [("PET_NNODES", str(total))]
            p = Pod("%s-%s-%d" % (name, role.lower(), i), specs[role]["template"], {}, env, rank)
            p.dns.append(p.hostname)
            pods.append(p)
    return pods


def expand(text, env):
    """Kubernetes' $(VAR) expansion (third_party/forked/golang/expansion): $$ is $, $(NAME) a defined variable's
    value, anything else left as it is."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)",
                  lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), text)


def container_env(pod, container):
    env = {"PATH": IMAGE_PATH, "HOME": "/root", "HOSTNAME": pod.hostname}
    for item in container.get("env", []):
        check("value" in item, "%s: env %s has a plain value (valueFrom is not emulated)" % (pod.hostname, item))
        env[item["name"]] = expand(str(item.get("value", "")), env)
    env.update(pod.added_env)
    return env


MADE_DIRS = []


def mount_script(pod, container):
    """Shell lines that mount the container's volumes at their mountPath (inside the pod's mount namespace)."""
    volumes = {v["name"]: v for v in pod.spec.get("volumes", [])}
    lines = ["set -e"]
    for vm in container.get("volumeMounts", []):
        vol, target = volumes[vm["name"]], vm["mountPath"]
        if not os.path.isdir(target):
            made = [target]
            while not os.path.exists(os.path.dirname(made[-1])):
                made.append(os.path.dirname(made[-1]))
            os.makedirs(target)
            MADE_DIRS.extend(made)      # deepest first
        if "secret" in vol:
            src = kubelet_secret_dir(pod, vol)
            lines.append("mount --bind %s %s" % (src, target))
            if vm.get("readOnly"):
                lines.append("mount -o remount,bind,ro %s" % target)
        elif vol.get("emptyDir", {}).get("medium") == "Memory":
            lines.append("mount -t tmpfs -o size=%d tmpfs %s" % (quantity(vol["emptyDir"]["sizeLimit"]), target))
        else:
            check(False, "%s: volume %s is not emulated here" % (pod.hostname, vol))
    return "\n".join(lines + ['exec "$@"'])


def quantity(text):
    m = re.match(r"^(\d+)(Ki|Mi|Gi|Ti)?$", str(text))
    return int(m.group(1)) * 1024 ** ("KMGT".index(m.group(2)[0]) + 1 if m.group(2) else 0)


def kubelet_secret_dir(pod, vol):
    """The kubelet's layout of a Secret volume: <dir>/..<stamp>/<key> with defaultMode, ..data -> ..<stamp>, and a
    link per key (pkg/volume/util/atomic_writer.go)."""
    root = os.path.join(WORK, "volumes", pod.hostname, vol["secret"]["secretName"])
    stamp = os.path.join(root, "..2026_01_01_00_00_00.000000001")
    os.makedirs(stamp)
    for key in sorted(os.listdir(os.path.join(WORK, "secret"))):
        shutil.copy(os.path.join(WORK, "secret", key), os.path.join(stamp, key))
        os.chmod(os.path.join(stamp, key), vol["secret"].get("defaultMode", 0o644))
        os.symlink(os.path.join("..data", key), os.path.join(root, key))
    os.symlink(os.path.basename(stamp), os.path.join(root, "..data"))
    return root


def write_names(c, pods, hosts):
    """Each pod's /etc/hosts (the kubelet's lines, then cluster DNS's answers) and resolv.conf (loopback only); pod i
    is on the cluster's host hosts[i]."""
    published = []
    for h, p in zip(hosts, pods):
        published += ["%s\t%s" % (c.hosts[h].addr, " ".join(sum(([n, "%s.%s" % (n, DOMAIN)] for n in p.dns), [])))]
    for h, p in zip(hosts, pods):
        own = "%s.%s.%s\t%s" % (p.hostname, p.subdomain, DOMAIN, p.hostname) if p.subdomain else p.hostname
        d = os.path.join(ETC_NETNS, c.hosts[h].ns)
        write(os.path.join(d, "hosts"), "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost "
              "ip6-localhost ip6-loopback\n%s\t%s\n# cluster DNS\n%s\n" % (c.hosts[h].addr, own, "\n".join(published)))
        write(os.path.join(d, "resolv.conf"), "nameserver 127.0.0.1\nsearch %s svc.cluster.local cluster.local\n"
              "options ndots:5\n" % DOMAIN)
        c.hosts[h].hostname = p.hostname


def start_example(c, name, hosts):
    """Starts the example's pods on the cluster's hosts `hosts` (one each); None when it does not make 2 pods."""
    with open(os.path.join(K8S_DIR, name)) as f:
        pods = pods_of([d for d in yaml.safe_load_all(f) if d])
    check(len(pods) == 2, "%s: 2 pods: %s" % (name, [p.hostname for p in pods]))
    if len(pods) != 2:
        return None
    results = os.path.join(RESULTS, name)
    os.makedirs(results)
    write_names(c, pods, hosts)
    procs = []
    for h, p in zip(hosts, pods):
        container = copy.deepcopy(p.spec["containers"][0])
        env = container_env(p, container)
        argv = [expand(a, env) for a in container.get("command", []) + container.get("args", [])]
        workdir = write(os.path.join(WORK, "pods", name, p.hostname, "workspace", "train.py"), TRAIN % results)
        out = open(os.path.join(WORK, "%s-%s.log" % (name, p.hostname)), "w")
        proc = c.spawn(h, ["/bin/sh", "-c", mount_script(p, container), "pod"] + ["env", "-i"] +
                       ["%s=%s" % kv for kv in env.items()] + argv,
                       cwd=os.path.dirname(workdir), stdout=out, stderr=subprocess.STDOUT)
        procs.append((p, proc, out))
    return {"name": name, "hosts": hosts, "pods": pods, "procs": procs, "results": results,
            "deadline": time.monotonic() + 60, "began": time.monotonic()}


def finish_example(c, example):
    name = example["name"]
    for p, proc, out in example["procs"]:
        try:
            code = proc.wait(timeout=max(1, example["deadline"] - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            code = None
        out.close()
        with open(out.name) as f:
            print("--- %s %s: exit %s\n%s" % (name, p.hostname, code, f.read()[-3000:]), flush=True)
        check(code == 0, "%s: pod %s exits 0 (got %s)" % (name, p.hostname, code))
    print("timing: %s %.1f s" % (name, time.monotonic() - example["began"]), flush=True)
    check_results(name, example["pods"], c, example["hosts"], example["results"])


def check_results(name, pods, c, hosts, results):
    got = []
    for path in sorted(glob.glob(os.path.join(results, "*.json"))):
        with open(path) as f:
            got.append(json.load(f))
    world = len(pods) * os.cpu_count()
    check(sorted(int(r["RANK"]) for r in got) == list(range(world)) and
          all(r["WORLD_SIZE"] == str(world) for r in got),
          "%s: ranks 0..%d of one job of %d: %s" % (name, world - 1, world,
                                                    [(r["RANK"], r["WORLD_SIZE"]) for r in got]))
    for p in pods:
        mine = [r for r in got if r["host"] == p.hostname]
        check(len(mine) == os.cpu_count() and all(r["GROUP_RANK"] == str(p.node_rank) for r in mine),
              "%s: pod %s runs %d ranks of node %d: %s" % (name, p.hostname, os.cpu_count(), p.node_rank, mine))
    shm = {quantity(v["emptyDir"]["sizeLimit"]) for v in pods[0].spec["volumes"] if "emptyDir" in v}
    check(len(got) == world and len({json.dumps(r["weights"]) for r in got}) == 1 and
          all(r["sum"] == world * (world - 1) / 2 and r["MASTER_ADDR"] == c.hosts[hosts[0]].addr and
              {r["shm"]} == shm for r in got),
          "%s: DDP in step (equal weights), all_reduce over every rank, MASTER_ADDR %s, /dev/shm %s: %s" % (
              name, c.hosts[hosts[0]].addr, shm, got))


def main():
    subprocess.run([DTRAIN, "secret", "init", "--dir", os.path.join(WORK, "secret")], check=True,
                   stdout=subprocess.DEVNULL)
    namespaces = []
    try:
        with Cluster(2 * len(EXAMPLES)) as c:
            namespaces = [h.ns for h in c.hosts]
            started = [start_example(c, name, (2 * k, 2 * k + 1)) for k, name in enumerate(EXAMPLES)]
            for example in (e for e in started if e):
                finish_example(c, example)
                left = c.processes_besides(example["hosts"], set(), 10)
                check(not left, "%s: nothing left in the pods: %s" % (example["name"],
                                                                      {i: describe(p) for i, p in left.items()}))
    finally:
        for d in MADE_DIRS:
            try:
                os.rmdir(d)     # empty: the pods' mounts were in their own mount namespaces
            except OSError as e:
                check(False, "cannot remove the mount point %s this test made: %s" % (d, e))
    check(not any(os.path.exists(os.path.join(ETC_NETNS, ns)) for ns in namespaces),
          "the pods' /etc/netns files are gone")
    check(not any(os.path.exists(d) for d in MADE_DIRS), "the mount points this test made are gone: %s" % MADE_DIRS)
    finish()


main()
