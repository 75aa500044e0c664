"""The tune overlay's knobs (`dtrain run --tune tune.yaml`, cli/tune/overlay.h), applied to an unmodified script.

The launcher reads and checks tune.yaml and gives every worker DTRAIN_TUNE, its Python knobs as compact JSON:
    {"file": "tune.yaml", "dataloader": {"num_workers": 4, "pin_memory": true, "prefetch_factor": 2,
     "persistent_workers": true}, "ddp": {"bucket_cap_mb": 25, "gradient_as_bucket_view": true},
     "threads": {"intra_op": 2}}
(each group and key only when the overlay sets it). The bootstrap (sitecustomize.py) calls apply() once, when it arms
at `import torch`, in the worker process only (never in its DataLoader workers or other children):
    threads     torch.set_num_threads(intra_op), there and then;
    dataloader  torch.utils.data.DataLoader.__init__ is wrapped: every DataLoader the script builds (subclasses that
                call it included) is built with the overlay's arguments instead of the script's. torch's rules are
                kept: prefetch_factor and persistent_workers apply only where num_workers ends up above 0 (and are
                put back to torch's defaults where the overlay took num_workers to 0); an IterableDataset that the
                script loads with num_workers=0 keeps 0 (each worker process would yield the whole dataset unless
                it shards itself, which would change the data); everything else the script passed (batch_sampler,
                sampler, collate_fn, ...) is left as it is;
    ddp         torch.nn.parallel.DistributedDataParallel.__init__ is wrapped the same way for bucket_cap_mb and
                gradient_as_bucket_view.
The cost is at construction only; no step pays anything. Rank 0 says on stderr, once per group, what the overlay
changed ("dtrain: tune.yaml: DataLoader num_workers 0 -> 4, pin_memory False -> True") and what it could not apply.
The env knobs are not here: the launcher puts them in the worker's environment itself, before Python starts.
A tune trial's count (DTRAIN_TUNE_TRIAL) is _dtrain_trial.py's, which the bootstrap applies after this overlay.
"""

import functools
import inspect
import json
import sys


class _Tune:
    def __init__(self, knobs, speaks):
        self.file = str(knobs.get("file") or "tune.yaml")
        self.loader = dict(knobs.get("dataloader") or {})
        self.ddp = dict(knobs.get("ddp") or {})
        self.threads = dict(knobs.get("threads") or {})
        self.speaks = speaks
        self.said = set()

    def say(self, group, changes):
        """One line on rank 0 the first time `group` changed something."""
        if not changes or group in self.said or not self.speaks:
            return
        self.said.add(group)
        try:
            sys.stderr.write("dtrain: %s: %s %s\n" % (self.file, group, ", ".join(changes)))
        except Exception:
            pass


class _Arguments:
    """A call's arguments, bound to its signature, with the defaults of those not given."""

    def __init__(self, bound, parameters):
        self.bound = bound
        self.parameters = parameters
        self.changes = []

    def has(self, name):
        return name in self.parameters

    def get(self, name):
        if name in self.bound.arguments:
            return self.bound.arguments[name]
        return self.parameters[name].default

    def set(self, name, value):
        before = self.get(name)
        if before != value:
            self.bound.arguments[name] = value
            self.changes.append("%s %s -> %s" % (name, before, value))


def _tune_loader(torch, tune, arguments):
    """The overlay's DataLoader arguments over the script's, in torch's rules (see the module's docstring)."""
    knobs = tune.loader
    notes = []
    theirs = arguments.get("num_workers")
    workers = theirs
    if "num_workers" in knobs:
        iterable = isinstance(arguments.get("dataset"), torch.utils.data.IterableDataset)
        if iterable and theirs == 0 and knobs["num_workers"] > 0:
            notes.append("num_workers left 0 for an IterableDataset (each worker would yield all of it)")
        else:
            workers = knobs["num_workers"]
            arguments.set("num_workers", workers)
    if "pin_memory" in knobs:
        arguments.set("pin_memory", knobs["pin_memory"])
    for name in ("prefetch_factor", "persistent_workers"):
        if not arguments.has(name):
            if name in knobs:
                notes.append("%s not applied: this torch's DataLoader has no such argument" % name)
        elif workers == 0:
            if name in knobs:
                notes.append("%s not applied: num_workers is 0" % name)
            if theirs != 0:
                arguments.set(name, arguments.parameters[name].default)
        elif name in knobs:
            arguments.set(name, knobs[name])
    return arguments.changes + notes


def _tune_ddp(torch, tune, arguments):
    for name in ("bucket_cap_mb", "gradient_as_bucket_view"):
        if name in tune.ddp:
            arguments.set(name, tune.ddp[name])
    return arguments.changes


def _wrap_init(torch, tune, cls, group, adjust):
    """cls.__init__, called with the overlay's arguments (adjust(torch, tune, arguments) sets them and returns the
    changes to say). A call that does not bind to the signature goes through as it is, for torch to refuse."""
    init = cls.__init__
    signature = inspect.signature(init)
    parameters = signature.parameters

    @functools.wraps(init)
    def tuned_init(*args, **kwargs):
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return init(*args, **kwargs)
        tune.say(group, adjust(torch, tune, _Arguments(bound, parameters)))
        return init(*bound.args, **bound.kwargs)

    cls.__init__ = tuned_init


def apply(torch, text, speaks):
    """Applies DTRAIN_TUNE's knobs (`text`); `speaks`: this process is rank 0, which says what changed."""
    tune = _Tune(json.loads(text), speaks)
    if "intra_op" in tune.threads:
        before = torch.get_num_threads()
        torch.set_num_threads(int(tune.threads["intra_op"]))
        tune.say("threads", ["intra_op %d -> %d" % (before, torch.get_num_threads())])
    if tune.loader:
        _wrap_init(torch, tune, torch.utils.data.DataLoader, "DataLoader", _tune_loader)
    if tune.ddp:
        _wrap_init(torch, tune, torch.nn.parallel.DistributedDataParallel, "DDP", _tune_ddp)
