"""The Kubernetes examples in configs/k8s/ hold only fields Kubernetes knows, and `dtrain run` reads the PET_*
variables a controller sets, the command line winning. No API server runs here, so:
  * core objects (v1 Service, batch/v1 Job) are deserialized with Debian's python3-kubernetes (ApiClient, which
    also refuses a missing required field) and walked strictly: every key must be in its model's attribute_map,
    recursively, unknown keys are errors (kubectl's --validate=strict);
  * the CRDs' envelopes are checked against the fields of the published CRDs (ENVELOPES below, written from the CRD
    files named there), and their embedded templates with the core models: a JobSet's replicatedJobs[].template is a
    batch/v1 JobTemplateSpec, a PyTorchJob's pytorchReplicaSpecs.<Master|Worker>.template a v1 PodTemplateSpec;
  * the checks catch a misspelling: every field name they accepted, renamed in memory, is refused, as are a few
    realistic slips (nProcPerNode outside elasticPolicy, a lower-case replica type, ...);
  * PET_NNODES, PET_NODE_RANK, PET_RDZV_ENDPOINT, PET_RDZV_BACKEND, PET_MASTER_ADDR, PET_MASTER_PORT and
    PET_NPROC_PER_NODE give `dtrain run --dry-run` its options, and a flag on the command line beats each;
  * `dtrain --help` describes `run` as multi-node capable.
The pods themselves run in test_k8s_pods.py. Needs python3-kubernetes and python3-yaml (scripts/setup.sh --tests)."""

import copy
import glob
import os
import re
import socket

from harness import SOURCE_DIR, Run, check, finish

try:
    import yaml
    import kubernetes.client as k8s
except ImportError as e:
    print("FAIL: %s: scripts/setup.sh --tests installs python3-kubernetes and python3-yaml" % e, flush=True)
    raise SystemExit(1)

K8S_DIR = os.path.join(SOURCE_DIR, "configs", "k8s")
CORE = {("v1", "Service"): "V1Service", ("v1", "Secret"): "V1Secret", ("v1", "ConfigMap"): "V1ConfigMap",
        ("batch/v1", "Job"): "V1Job"}
# The CRDs' fields, from their published definitions (openAPIV3Schema). A dict is an object with these keys, [x] an
# array of x, a "V1..." string a core model, None a scalar (or a map of scalars), {"*": x} a map of x.
META = "V1ObjectMeta"
ENVELOPES = {
    # kubernetes-sigs/jobset v0.12.0, config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml, version v1alpha2.
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): {
        "apiVersion": None, "kind": None, "metadata": META,
        "spec": {
            "coordinator": {"jobIndex": None, "podIndex": None, "replicatedJob": None},
            "failurePolicy": {"maxRestarts": None, "restartStrategy": None,
                              "rules": [{"action": None, "name": None, "onJobFailureMessagePatterns": None,
                                         "onJobFailureReasons": None, "targetReplicatedJobs": None}]},
            "managedBy": None,
            "network": {"enableDNSHostnames": None, "publishNotReadyAddresses": None, "subdomain": None},
            "replicatedJobs": [{"dependsOn": [{"name": None, "status": None}], "groupName": None, "name": None,
                                "replicas": None, "template": "V1JobTemplateSpec"}],
            "startupPolicy": {"startupPolicyOrder": None},
            "successPolicy": {"operator": None, "targetReplicatedJobs": None},
            "suspend": None, "ttlSecondsAfterFinished": None,
            "volumeClaimPolicies": [{"retentionPolicy": {"whenDeleted": None},
                                     "templates": ["V1PersistentVolumeClaim"]}]}},
    # kubeflow/training-operator v1.9.0, manifests/base/crds/kubeflow.org_pytorchjobs.yaml, version v1; the replica
    # types are the webhook's (pkg/webhooks/pytorch/pytorchjob_webhook.go: Master and Worker only).
    ("kubeflow.org/v1", "PyTorchJob"): {
        "apiVersion": None, "kind": None, "metadata": META,
        "spec": {
            "elasticPolicy": {"maxReplicas": None, "maxRestarts": None, "metrics": None, "minReplicas": None,
                              "nProcPerNode": None, "rdzvBackend": None, "rdzvConf": [{"key": None, "value": None}],
                              "rdzvHost": None, "rdzvId": None, "rdzvPort": None, "standalone": None},
            "nprocPerNode": None,
            "pytorchReplicaSpecs": {
                role: {"replicas": None, "restartPolicy": None, "template": "V1PodTemplateSpec"}
                for role in ("Master", "Worker")},
            "runPolicy": {"activeDeadlineSeconds": None, "backoffLimit": None, "cleanPodPolicy": None,
                          "managedBy": None, "ttlSecondsAfterFinished": None, "suspend": None,
                          "schedulingPolicy": {"minAvailable": None, "minResources": None, "priorityClass": None,
                                               "queue": None, "scheduleTimeoutSeconds": None}}}},
}
# A model's scalar types and the YAML values Kubernetes takes for them (a quantity such as nvidia.com/gpu: 8 is a
# string in the model and may be a number in YAML; an int-or-string is an object).
SCALARS = {"str": (str, int, float), "int": (int,), "float": (int, float), "bool": (bool,), "datetime": (str,),
           "date": (str,), "object": (str, int, float, bool, dict, list)}


def show(path):
    return "".join("[%d]" % p if isinstance(p, int) else "." + p for p in path).lstrip(".") or "(top)"


class Checker:
    """One document's walk: errors found, and the path of every field name it checked (for the mutation cases)."""

    def __init__(self):
        self.errors = []
        self.fields = []

    def model(self, value, klass, path):
        """value against a python-kubernetes type name ("V1Job", "list[V1Container]", "dict(str, str)", "int")."""
        if klass.startswith("list["):
            if not isinstance(value, list):
                return self.errors.append("%s: expected a list (%s), got %r" % (show(path), klass, value))
            for i, item in enumerate(value):
                self.model(item, klass[5:-1], path + (i,))
        elif klass.startswith("dict("):
            if not isinstance(value, dict):
                return self.errors.append("%s: expected a map (%s), got %r" % (show(path), klass, value))
            inner = re.match(r"dict\([^,]+, (.+)\)$", klass).group(1)
            for key, item in value.items():
                self.model(item, inner, path + (key,))
        elif klass in SCALARS:
            if not isinstance(value, SCALARS[klass]) or (klass in ("int", "float", "str") and isinstance(value, bool)):
                self.errors.append("%s: expected %s, got %r" % (show(path), klass, value))
        else:
            cls = getattr(k8s, klass)
            if not isinstance(value, dict):
                return self.errors.append("%s: expected a %s object, got %r" % (show(path), klass, value))
            by_json = {j: attr for attr, j in cls.attribute_map.items()}
            for key, item in value.items():
                if key not in by_json:
                    self.errors.append("%s: unknown field %r in %s (it has %s)" % (
                        show(path), key, klass, ", ".join(sorted(by_json))))
                    continue
                self.fields.append(path + (key,))
                self.model(item, cls.openapi_types[by_json[key]], path + (key,))

    def envelope(self, value, schema, path):
        """value against an ENVELOPES schema; its core templates through model()."""
        if isinstance(schema, str):
            return self.core(value, schema, path)
        if isinstance(schema, list):
            if not isinstance(value, list):
                return self.errors.append("%s: expected a list, got %r" % (show(path), value))
            for i, item in enumerate(value):
                self.envelope(item, schema[0], path + (i,))
        elif isinstance(schema, dict):
            if not isinstance(value, dict):
                return self.errors.append("%s: expected an object, got %r" % (show(path), value))
            for key, item in value.items():
                if key not in schema:
                    self.errors.append("%s: unknown field %r (the CRD has %s)" % (
                        show(path), key, ", ".join(sorted(schema))))
                    continue
                self.fields.append(path + (key,))
                self.envelope(item, schema[key], path + (key,))

    def core(self, value, klass, path):
        """The strict walk, then python-kubernetes' own deserialization (which refuses missing required fields)."""
        before = len(self.errors)
        self.model(value, klass, path)
        if len(self.errors) == before:
            try:
                k8s.ApiClient()._ApiClient__deserialize(value, klass)
            except (ValueError, TypeError) as e:
                self.errors.append("%s: %s refuses it: %s" % (show(path), klass, e))


def validate(doc):
    """(errors, checked field paths) of one YAML document."""
    c = Checker()
    key = (doc.get("apiVersion"), doc.get("kind")) if isinstance(doc, dict) else None
    if key in CORE:
        c.core(doc, CORE[key], ())
    elif key in ENVELOPES:
        c.envelope(doc, ENVELOPES[key], ())
    else:
        c.errors.append("apiVersion/kind %s is neither a core object nor a known CRD" % (key,))
    return c.errors, c.fields


def load(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def renamed(doc, path, new_key):
    """A deep copy of doc with the key at `path` renamed to new_key (its value and place kept)."""
    doc = copy.deepcopy(doc)
    parent = doc
    for p in path[:-1]:
        parent = parent[p]
    items = list(parent.items())
    parent.clear()
    parent.update((new_key if k == path[-1] else k, v) for k, v in items)
    return doc


def at(doc, path):
    for p in path:
        doc = doc[p]
    return doc


def check_manifests():
    paths = sorted(glob.glob(os.path.join(K8S_DIR, "*.yaml")))
    names = [os.path.basename(p) for p in paths]
    check(names == ["indexed-job.yaml", "jobset.yaml", "pytorchjob.yaml"], "configs/k8s holds the 3 examples: %s" % names)
    for path in paths:
        for n, doc in enumerate(load(path)):
            what = "%s #%d (%s)" % (os.path.basename(path), n, doc.get("kind"))
            errors, fields = validate(doc)
            check(not errors, "%s: every field is Kubernetes': %s" % (what, errors))
            check(len(fields) >= 5, "%s: the walk checked its fields (%d)" % (what, len(fields)))
            # Every field name the walk accepted, misspelled, is refused at that place.
            missed = []
            for field in fields:
                errs, _ = validate(renamed(doc, field, field[-1] + "x"))
                # A misspelled apiVersion or kind leaves a document of no known kind.
                if not any((e.startswith(show(field[:-1])) and repr(field[-1] + "x") in e) or
                           (field in (("apiVersion",), ("kind",)) and "neither" in e) for e in errs):
                    missed.append(show(field))
            check(not missed, "%s: each of its %d field names, misspelled, is refused; not: %s" % (
                what, len(fields), missed))
            print("%s: %d fields checked, each refused when misspelled" % (what, len(fields)), flush=True)


def check_realistic_slips():
    """Misspellings a person makes, in memory; each must be refused."""
    docs = {name: load(os.path.join(K8S_DIR, name)) for name in ("indexed-job.yaml", "jobset.yaml", "pytorchjob.yaml")}
    job_pod = ("spec", "template", "spec")
    js_pod = ("spec", "replicatedJobs", 0, "template", "spec", "template", "spec")
    ptj_pod = ("spec", "pytorchReplicaSpecs", "Worker", "template", "spec")
    slips = [
        ("indexed-job.yaml", 0, ("spec", "publishNotReadyAddresses"), "publishNotReadyAdresses"),
        ("indexed-job.yaml", 1, ("spec", "completionMode"), "completionmode"),
        ("indexed-job.yaml", 1, job_pod + ("containers", 0, "volumeMounts", 0, "mountPath"), "mountpath"),
        ("indexed-job.yaml", 1, job_pod + ("volumes", 1, "emptyDir", "sizeLimit"), "size"),
        ("jobset.yaml", 0, ("spec", "replicatedJobs"), "replicatedJob"),
        ("jobset.yaml", 0, ("spec", "network", "enableDNSHostnames"), "enableDnsHostnames"),
        ("jobset.yaml", 0, js_pod + ("containers", 0, "resources", "limits"), "limit"),
        ("pytorchjob.yaml", 0, ("spec", "nprocPerNode"), "nProcPerNode"),   # elasticPolicy's spelling
        ("pytorchjob.yaml", 0, ("spec", "pytorchReplicaSpecs", "Master"), "master"),
        ("pytorchjob.yaml", 0, ptj_pod + ("volumes", 0, "secret", "secretName"), "name"),
    ]
    for name, n, path, new in slips:
        doc = copy.deepcopy(docs[name][n])
        if name == "pytorchjob.yaml":   # the anchored template is one object in both roles: give Worker its own
            doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"] = copy.deepcopy(at(doc, ptj_pod[:-1]))
        errors, _ = validate(renamed(doc, path, new))
        check(any(repr(new) in e for e in errors), "%s: %s renamed %s is refused: %s" % (name, show(path), new, errors))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def dry_run(args, env):
    r = Run(["run", "--dry-run"] + args + ["x.py"], env=env, timeout=30).run()
    return r.code, r.out, r.err


def check_pet_precedence():
    """Each PET_ variable a Kubernetes controller sets gives `dtrain run` its option; the flag beats it. 10.255.255.1
    is not this machine: node rank 0 there is refused (it would run the launcher), which shows where the endpoint came
    from without resolving a name."""
    port = free_port()
    here, away = "127.0.0.1:%d" % port, "10.255.255.1:29400"
    joiner = {"PET_NNODES": "2", "PET_NODE_RANK": "1", "PET_RDZV_ENDPOINT": away}
    cases = [
        ("PET_NNODES=3 sets the node count", [], dict(joiner, PET_NNODES="3"), 0, ["3 nodes x 1 worker"]),
        ("--nnodes 2 beats PET_NNODES=3", ["--nnodes", "2"], dict(joiner, PET_NNODES="3"), 0, ["2 nodes x 1 worker"]),
        ("PET_NODE_RANK=0 makes this node the launcher's (the endpoint is not here)", [],
         dict(joiner, PET_NODE_RANK="0"), 2, ["--node-rank 0 runs the launcher", "10.255.255.1"]),
        ("--node-rank 1 beats PET_NODE_RANK=0", ["--node-rank", "1"], dict(joiner, PET_NODE_RANK="0"), 0,
         ["2 nodes x 1 worker"]),
        ("PET_NODE_RANK=2 is not below PET_NNODES=2", [], dict(joiner, PET_NODE_RANK="2"), 2, ["--node-rank"]),
        ("PET_RDZV_ENDPOINT is the endpoint", [], dict(joiner, PET_NODE_RANK="0"), 2, ["--rdzv-endpoint " + away]),
        ("--rdzv-endpoint beats PET_RDZV_ENDPOINT", ["--rdzv-endpoint", here], dict(joiner, PET_NODE_RANK="0"), 0,
         ["2 nodes x 1 worker"]),
        ("PET_RDZV_BACKEND=etcd is refused", [], dict(joiner, PET_RDZV_BACKEND="etcd"), 2, ["--rdzv-backend etcd"]),
        ("--rdzv-backend c10d beats PET_RDZV_BACKEND=etcd", ["--rdzv-backend", "c10d"],
         dict(joiner, PET_RDZV_BACKEND="etcd"), 0, ["2 nodes x 1 worker"]),
        ("PET_MASTER_ADDR/PORT are the endpoint without PET_RDZV_ENDPOINT (PyTorchJob's way)", [],
         {"PET_NNODES": "2", "PET_NODE_RANK": "0", "PET_MASTER_ADDR": "10.255.255.1", "PET_MASTER_PORT": "23456"},
         2, ["--node-rank 0 runs the launcher", "--master-addr 10.255.255.1"]),
        ("--master-addr beats PET_MASTER_ADDR", ["--master-addr", "127.0.0.1"],
         {"PET_NNODES": "2", "PET_NODE_RANK": "0", "PET_MASTER_ADDR": "10.255.255.1", "PET_MASTER_PORT": str(port)},
         0, ["2 nodes x 1 worker"]),
        ("PET_MASTER_PORT=x is refused", [],
         {"PET_NNODES": "2", "PET_NODE_RANK": "1", "PET_MASTER_ADDR": "10.255.255.1", "PET_MASTER_PORT": "x"},
         2, ["--master-port must be a number", "'x'"]),
        ("--master-port beats PET_MASTER_PORT=x", ["--master-port", "23456"],
         {"PET_NNODES": "2", "PET_NODE_RANK": "1", "PET_MASTER_ADDR": "10.255.255.1", "PET_MASTER_PORT": "x"},
         0, ["2 nodes x 1 worker"]),
        ("PET_RDZV_ENDPOINT beats PET_MASTER_ADDR", [], dict(joiner, PET_MASTER_ADDR="10.255.255.2"), 0,
         ["2 nodes x 1 worker"]),
        ("PET_NPROC_PER_NODE=auto: a worker per CPU here (no GPU)", [], dict(joiner, PET_NPROC_PER_NODE="auto"), 0,
         ["2 nodes x %d worker" % os.cpu_count()]),
        ("-n 1 beats PET_NPROC_PER_NODE=auto", ["-n", "1"], dict(joiner, PET_NPROC_PER_NODE="auto"), 0,
         ["2 nodes x 1 worker"]),
    ]
    for what, args, env, code, words in cases:
        got, out, err = dry_run(args, env)
        text = out + err
        check(got == code and all(w in text for w in words), "%s: exit %d naming %s (got %s: %s)" % (
            what, code, words, got, text[-400:] if got != 0 else text[:200]))


def check_help():
    r = Run(["--help"], timeout=30).run()
    line = next((l for l in r.out.splitlines() if l.strip().startswith("run ")), "")
    check(r.code == 0 and "on one node" not in line and "--nnodes" in line,
          "dtrain --help: run is not 'on one node' and names --nnodes: %r" % line)


check_manifests()
check_realistic_slips()
check_pet_precedence()
check_help()
finish()
