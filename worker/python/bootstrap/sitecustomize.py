"""dtrain's PyTorch bootstrap (health.instrument: auto): an unmodified PyTorch script reports its steps to dtrain.

The agent puts this directory on the PYTHONPATH of workers whose command runs Python (agent/job/python_command.h),
after dtrain_health.py's and before everything of the user's, so Python's site module imports this file as
`sitecustomize`. It then runs the sitecustomize that would have been imported without it (the next one on sys.path:
the user's, or the distribution's such as Debian's /etc/python3.X/sitecustomize.py), which takes its place in
sys.modules, so nothing of theirs is lost.

It arms only when the program imports torch: a finder at the head of sys.meta_path waits for that one import, lets
it run, and then instruments torch and leaves sys.meta_path. A program that never imports torch pays one name
comparison per module it imports, and is not otherwise touched. It arms only in the worker process the agent started
(DTRAIN_WORKER_PID is its pid, or unset: dtrain_health's rule): the Python children that inherit this PYTHONPATH (a
DataLoader's spawned workers, a `subprocess.run([sys.executable, ...])`, torch.multiprocessing's) and the children
forked from the worker (their wrappers turn off at the fork) measure and send nothing, so they never speak for the
rank.

Armed, it measures, per optimizer step:
    steps       one step is one call of an optimizer's step() (any torch.optim.Optimizer subclass: each class's
                step is wrapped once, when its first instance is made; a wrapper such as ZeroRedundancyOptimizer,
                whose step calls its inner optimizer's, is counted once). The wrapper is used on every torch
                version, also where torch has global step hooks (2.x): those cannot tell an inner optimizer's step
                from its wrapper's. Gradient-accumulation micro-steps call no step() and are not steps. A step runs
                from the end of the previous one; the first from its first batch, DDP forward or backward().
    data wait   wall time inside DataLoader iterators' __next__ (single- and multi-process loaders alike);
    loss        the sum of the 0-dim tensors whose backward() ran since the last step (with loss / K accumulation,
                the mean over the micro-batches), a GradScaler's scaled loss counted unscaled (read as
                dtrain_health's report(loss=) does: by its sender thread; on a device taken at most every
                DTRAIN_HEALTH_LOSS_EVERY steps and read only once its value exists);
    tokens,     when a batch is, or begins with (a tuple, a list, a dict's input_ids or first value), a tensor:
    samples     its first dimension is samples; when it holds integers, batch x sequence, its elements are tokens.
                Without a DataLoader, DDP and FSDP models' first forward argument (or input_ids=, idx=): its first
                dimension is samples, its elements tokens when it is an integer tensor of 2 or more dimensions;
    model       at a wrapped model's first forward, its trainable parameters N (model_params, with 6N
                model_flops_per_token and device_name);
    comm wait   wall time inside blocking torch.distributed collectives (async_op=True ones return at once and are
                not counted; a collective made of others is counted once), and DDP's gradient reduction: from the
                last gradient backward produced for a DDP model's parameters (DDP then launches its last bucket) to
                the end of backward(), where DDP waits for every bucket (see instrument_ddp in
                _dtrain_dist_wrappers.py; with dtrain_health.watch(), its hook's timing instead). DDP's reduction
                and the script's communication hooks are left as they are. On CUDA tensors both come from CUDA
                events read once they have passed, never waited for;
    memory      on CUDA, memory_reserved, max_memory_allocated and the device's total (RSS is the reporter's);
    phase       "data" inside __next__, "forward" after a batch or a step, "backward", "optimizer", and
                "torch.distributed.<name>" while a blocking collective runs (the previous phase after it): a rank
                hung in one is reported there. Set only once reports run, and never over a script's own phases.
and reports them through dtrain_health (its reporter, socket and thread; see that module for the fields). The
reporter starts at the first optimizer step, so a torch program that never steps an optimizer sends nothing and is
never judged by the launcher's start-up or heartbeat checks. A script that uses dtrain_health's step() or timed()
itself is counted by those alone (explicit use wins). A torch without one of these hooks gets one line on rank 0
naming what is not measured. Armed, it also passes init_process_group through dtrain_health's wait_quietly() once
the script reports, since that call keeps the reporter's thread from heartbeating while it waits for late peers
(wrap_init_process_group in _dtrain_dist_wrappers.py).

This file holds what runs at interpreter start (the finder, _load_theirs) and the arming; the rest is in files beside
it, which _arm loads once torch is imported: _dtrain_instrumentation.py (the state: what is measured, the step's
bookkeeping), _dtrain_loop_wrappers.py (optimizers, backward, DataLoaders) and _dtrain_dist_wrappers.py
(torch.distributed, DDP); and _dtrain_tune.py, the tune overlay's knobs (`--tune`, DTRAIN_TUNE), and _dtrain_trial.py, a
tune trial's count (DTRAIN_TUNE_TRIAL, which also installs the finder where the agent gave no health socket: the trial
alone then), which _tune applies once arming is done, whether or not it succeeded. The wrappers are in C (hooks.c, the
extension _dtrain_hooks, which the build puts beside this file) for the interpreter dtrain was built with
(DTRAIN_HOOKS_PYTHON, Debian's /usr/bin/python3 by default): 1.6-1.9 us a wrapped call in a training loop, against
2.6-2.9 us for the Python wrappers (BENCHMARKS.md), which any other interpreter gets (the extension's file name carries
its ABI tag, so no other version loads it) and which do the same work: the measurements are the same. A torch with CUDA
gets the Python wrapper for collectives (its CUDA events) either way. The extension, the files beside this one and
dtrain_health are loaded from their files, never by name through sys.path: a script's own _dtrain_hooks.py or
dtrain_health.py (or a module named as one of those files) is never run by the bootstrap (a script that imports
dtrain_health itself is reported through that import).

The loss is held detached (loss.detach(): its value, no autograd graph) and dropped at the step: what the script
frees, a graph kept by backward(retain_graph=True) included, is freed as without dtrain.

An exception inside the instrumentation, arming included, never reaches the program: it is reported once on stderr
and the instrumentation turns itself off in this process (the wrappers then only call through).
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _load_theirs():
    """Runs the sitecustomize that comes after this directory on sys.path, as `sitecustomize`."""
    import importlib.machinery
    import importlib.util

    rest = []
    seen_here = False
    for entry in sys.path:
        if seen_here:
            rest.append(entry)
        elif os.path.abspath(entry or os.curdir) == _HERE:
            seen_here = True
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest if seen_here else
                                                    [e for e in sys.path if os.path.abspath(e or os.curdir) != _HERE])
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    # Theirs is `sitecustomize` from now on: the import machinery keeps whatever sys.modules holds under the name
    # once this file has run, and their code may import itself by that name.
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


def _load_hooks():
    """_dtrain_hooks (hooks.c): the wrappers in C, built beside this file for the interpreter dtrain was built with.
    None for any other interpreter (the file's name carries its ABI tag), or where it was not built: the Python
    wrappers then do the same work (about 2.6-2.9 us a wrapped call in a training loop, against 1.6-1.9).
    Loaded from its file: `import _dtrain_hooks` would take a script's _dtrain_hooks.py before it. The name stays the
    script's: loading an extension puts it in sys.modules, and what was there is put back."""
    import importlib.machinery
    import importlib.util
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = os.path.join(_HERE, "_dtrain_hooks" + suffix)
        if not os.path.isfile(path):
            continue
        theirs = sys.modules.get("_dtrain_hooks")
        try:
            spec = importlib.util.spec_from_file_location(
                "_dtrain_hooks", path, loader=importlib.machinery.ExtensionFileLoader("_dtrain_hooks", path))
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
        except Exception:
            return None
        finally:
            if theirs is None:
                sys.modules.pop("_dtrain_hooks", None)
            else:
                sys.modules["_dtrain_hooks"] = theirs
    return None


def _imported_helper():
    """The script's own import of dtrain_health, or None (a file of that name of its own lacks _Reporter)."""
    imported = sys.modules.get("dtrain_health")
    return imported if hasattr(imported, "_Reporter") else None


def _helper():
    """dtrain_health, which the bootstrap reports through: the script's own import of it when it made one (one
    reporter per process), else the file beside this directory, loaded from its path, never a file of that name in
    the script's directory (the script's own business, which the bootstrap must not run). Registered as
    `dtrain_health` when that name leads to this same file, so that a later import of it by the script finds this
    one and its reporter."""
    import importlib.machinery
    import importlib.util
    own = _imported_helper()
    if own is not None:
        return own
    imported = sys.modules.get("dtrain_health")
    path = os.path.join(os.path.dirname(_HERE), "dtrain_health.py")
    spec = importlib.util.spec_from_file_location("dtrain_health", path)
    module = importlib.util.module_from_spec(spec)
    found = importlib.machinery.PathFinder.find_spec("dtrain_health")
    register = imported is None and found is not None and found.origin is not None and \
        os.path.realpath(found.origin) == os.path.realpath(path)
    if register:
        sys.modules["dtrain_health"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        if register:
            sys.modules.pop("dtrain_health", None)
        raise
    return module


def _load_sibling(name, **given):
    """The module `name`.py beside this file, loaded from its path: never through sys.path (a script's module of that
    name is never run for it) and never registered in sys.modules (nor is the script's displaced). `given` (what it
    takes from the bootstrap or another sibling) is set on it once it ran."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, os.path.join(_HERE, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for key, value in given.items():
        setattr(module, key, value)
    return module


def _say_off(error):
    """The one line that says the instrumentation is off in this process after an error of its own."""
    try:
        sys.stderr.write("dtrain: the PyTorch instrumentation (health.instrument: auto) is off in this process "
                         "after an error of its own: %s: %s. The program goes on; set health.instrument: off to "
                         "silence this, or report it with this line.\n" % (type(error).__name__, error))
    except Exception:
        pass


_state = None
_hooks = None


def _parts(loop, dist):
    """What each part measures, for the line that says what a torch without it leaves unmeasured."""
    return ((loop.instrument_optimizers, "torch.optim.Optimizer", "steps"),
            (loop.instrument_backward, "torch.Tensor.backward", "the loss and the backward phase"),
            (loop.instrument_grad_scalers, "torch.cuda.amp.GradScaler", "the loss before a GradScaler's scaling"),
            (loop.instrument_data_loaders, "torch.utils.data.dataloader._BaseDataLoaderIter.__next__",
             "data wait, tokens/s and samples/s"),
            (dist.instrument_collectives, "torch.distributed", "waits in blocking collectives"),
            (dist.instrument_ddp, "torch.nn.parallel.DistributedDataParallel",
             "DDP's gradient reduction (exposed communication), its samples, tokens and size"),
            (dist.instrument_fsdp, "torch.distributed.fsdp", "FSDP's samples, tokens and size"))


def _arm(torch):
    global _state, _hooks
    _hooks = _load_hooks()
    instrumentation = _load_sibling("_dtrain_instrumentation", say_off=_say_off, helper=_helper)
    loop = _load_sibling("_dtrain_loop_wrappers")
    dist = _load_sibling("_dtrain_dist_wrappers", first_tensor=loop.first_tensor, token_dtypes=loop.token_dtypes,
                         imported_helper=_imported_helper)
    # (The state's class is named _Instrumentation either way: a script finds it by that name.)
    _state = (instrumentation.over_hooks(_hooks) if _hooks is not None else instrumentation._Instrumentation)()
    os.register_at_fork(after_in_child=_forked)
    # A torch built without CUDA (or ROCm, which torch.cuda also serves) has no device to measure: its wrappers then
    # skip every device check.
    version = getattr(torch, "version", None)
    if getattr(version, "cuda", None) or getattr(version, "hip", None):
        _state.cuda = getattr(torch, "cuda", None)
    missing = []
    for part, hook, what in _parts(loop, dist):
        try:
            part(torch, _state, _hooks)
        except (AttributeError, ImportError):
            missing.append("%s (no %s)" % (what, hook))
        except Exception as error:
            _state.fail(error)
            return
    loop.optimizer_made = lambda: dist.instrument_fsdp(torch, _state, _hooks)
    if missing and os.environ.get("RANK", "0") == "0":
        try:
            sys.stderr.write("dtrain: torch %s lacks what the PyTorch instrumentation hooks into; not measured: %s. "
                             "dtrain_health's timed(), step() and report() measure these by hand.\n"
                             % (getattr(torch, "__version__", "?"), "; ".join(missing)))
        except Exception:
            pass


def _forked():
    """A child forked from the worker (a DataLoader worker, os.fork) is not the worker: its wrappers only call
    through."""
    if _state is not None:
        _state.on = False


def _arm_quietly(torch):
    """_arm, whose errors never reach the program (see the module's docstring), where the agent gave a health
    socket (without one only a tune trial installed the finder)."""
    if os.environ.get("DTRAIN_HEALTH_SOCKET"):
        try:
            _arm(torch)
        except Exception as error:
            if _state is not None:
                _state.fail(error)
            else:
                _say_off(error)
    _tune(torch)


def _tune(torch):
    """The tune overlay's knobs (`--tune`: DTRAIN_TUNE, _dtrain_tune.py), then a tune trial's count
    (DTRAIN_TUNE_TRIAL, _dtrain_trial.py), applied whether or not the measuring armed. An error of either's own is
    said once: the overlay's leaves the script's own settings, the trial's writes no trial line."""
    text, trial = os.environ.get("DTRAIN_TUNE"), os.environ.get("DTRAIN_TUNE_TRIAL")
    if not text and not trial:
        return
    if text:
        try:
            _load_sibling("_dtrain_tune").apply(torch, text, os.environ.get("RANK", "0") == "0")
        except Exception as error:
            _say_tune("the tune overlay (--tune) is not applied in this process", error,
                      "The program goes on with its own settings.")
    if trial:
        try:
            _load_sibling("_dtrain_trial").trial(torch, trial, _state)
        except Exception as error:
            _say_tune("the tune trial (DTRAIN_TUNE_TRIAL) is off in this process", error,
                      "The program goes on; this rank writes no trial line.")


def _say_tune(what, error, then):
    try:
        sys.stderr.write("dtrain: %s after an error of its own: %s: %s. %s\n" % (what, type(error).__name__, error,
                                                                                   then))
    except Exception:
        pass


def _speaks_for_rank():
    """Whether this process is the worker the agent started: dtrain_health's rule (its _speaks_for_rank; a malformed
    DTRAIN_WORKER_PID counts as unset, which the helper says when it loads)."""
    text = os.environ.get("DTRAIN_WORKER_PID", "")
    return not text.isdigit() or int(text) == os.getpid()


class _TorchFinder:
    """Finds nothing itself: on `import torch` it has the other finders find torch, and arms once torch ran."""

    def __init__(self):
        self.pid = os.getpid()

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        if os.getpid() != self.pid:   # a forked child of the worker, which had not imported torch yet
            self.leave()
            return None
        try:
            spec = None
            for finder in sys.meta_path:
                find = getattr(finder, "find_spec", None)
                if finder is self or find is None:
                    continue
                spec = find(name, path, target)
                if spec is not None:
                    break
            if spec is None or spec.loader is None:
                return None
            loader = spec.loader
            execute = loader.exec_module

            def exec_and_arm(module):
                del loader.exec_module
                self.leave()
                execute(module)
                _arm_quietly(module)

            loader.exec_module = exec_and_arm
            return spec
        except Exception as error:
            # Torch is then found by the finders after this one, as if it were not here.
            self.leave()
            _say_off(error)
            return None

    def leave(self):
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass


if (os.environ.get("DTRAIN_HEALTH_SOCKET") or os.environ.get("DTRAIN_TUNE_TRIAL")) and "torch" not in sys.modules \
        and _speaks_for_rank():
    sys.meta_path.insert(0, _TorchFinder())
_load_theirs()
