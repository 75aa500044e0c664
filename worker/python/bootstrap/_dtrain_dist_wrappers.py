"""The PyTorch bootstrap's wrappers of torch.distributed (sitecustomize.py): blocking collectives (comm wait, their
phase), init_process_group (through dtrain_health's wait_quietly()), DDP's gradient reduction (exposed
communication), and DDP and FSDP models' forward (samples and tokens without a DataLoader, the model's size).

Each instrument_* takes torch, the process's _Instrumentation (_dtrain_instrumentation.py) and _dtrain_hooks (None
where the C wrappers were not built for this interpreter). An error of a wrapper's own goes to state.fail() and never
reaches the program; the wrapped function's own exceptions pass unchanged. sitecustomize loads this file from its path
(never through sys.path) when torch is imported, and gives it first_tensor and imported_helper below once it ran.
"""

import functools
import sys

# Given by sitecustomize when it loads this file: first_tensor(torch, batch), the tensor whose first dimension is a
# batch's samples, and token_dtypes(torch), the integer dtypes of token ids (both _dtrain_loop_wrappers.py's), and
# imported_helper(), the script's own import of dtrain_health or None.
first_tensor = None
token_dtypes = None
imported_helper = None

# Collectives whose blocking form is timed; any of them a torch version lacks is skipped.
COLLECTIVES = ("all_reduce", "all_gather", "all_gather_object", "all_gather_into_tensor", "_all_gather_base",
                "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base", "broadcast",
                "broadcast_object_list", "reduce", "gather", "gather_object", "scatter", "scatter_object_list",
                "all_to_all", "all_to_all_single", "barrier", "monitored_barrier")


def wrap_collective(fn, state, hooks):
    """`fn`, a collective, timed when it blocks; the phase names it meanwhile."""
    import inspect
    clock = state.clock
    cuda = state.cuda
    try:
        position = list(inspect.signature(fn).parameters).index("async_op")
    except ValueError:
        position = sys.maxsize   # (never async)

    phase = "torch.distributed." + fn.__name__
    if hooks is not None and cuda is None:
        # (A torch with CUDA gets the Python wrapper below: its CUDA events.)
        return functools.update_wrapper(hooks.Hook(hooks.KIND_COLLECTIVE, fn, state, phase=phase,
                                                   async_position=position), fn)

    def on_device(args):
        first = args[0] if args else None
        if isinstance(first, (list, tuple)):
            first = first[0] if first else None
        return getattr(first, "is_cuda", False)

    def timed_collective(*args, **kwargs):
        if not state.on or (kwargs and kwargs.get("async_op")) or (len(args) > position and args[position]):
            return fn(*args, **kwargs)   # off, or async_op=True: it returns at once and is not counted
        if state.in_collective:
            return fn(*args, **kwargs)
        previous = state.phase
        state.phase = phase
        start = None
        # No tensor is on a CUDA device before torch.cuda initialised (its is_initialized(), read without a call).
        if cuda is not None and getattr(cuda, "_initialized", True):
            try:
                # On a GPU the call returns once the collective is queued: its time is read from CUDA events later.
                if on_device(args):
                    start = cuda.Event(enable_timing=True)
                    start.record()
            except Exception as error:
                state.fail(error)
                return fn(*args, **kwargs)
        state.in_collective = True
        began = clock()
        try:
            return fn(*args, **kwargs)
        finally:
            state.in_collective = False
            if start is None:
                state.comm_wait += clock() - began
            else:
                try:
                    end = cuda.Event(enable_timing=True)
                    end.record()
                    state.device_events.append((start, end))
                except Exception as error:
                    state.fail(error)
            state.phase = previous

    return functools.update_wrapper(timed_collective, fn)


def wrap_init_process_group(fn, state):
    """init_process_group holds the interpreter lock while it waits for late peers (torch 1.13: in the TCPStore's
    connect and the store barrier, the whole wait), so dtrain_health's sender cannot heartbeat through it. Once the
    script reports (dtrain_health imported: its reporter runs), the call goes through the reporter's wait_quietly(),
    whose reports tell the launcher not to judge the rank by its heartbeat meanwhile. Before that nothing is sent and
    nothing is judged, and the call is only passed through."""

    def init_process_group(*args, **kwargs):
        helper = state.health if state.health is not None else imported_helper()
        reporter = getattr(helper, "_reporter", None)
        if reporter is None or not state.on:
            return fn(*args, **kwargs)
        return reporter.wait_quietly("torch.distributed.init_process_group", fn, *args, **kwargs)

    return functools.update_wrapper(init_process_group, fn)


def instrument_collectives(torch, state, hooks):
    """The blocking collectives of COLLECTIVES and init_process_group, in torch.distributed and its c10d module."""
    dist = torch.distributed
    if not dist.is_available():
        return
    c10d = dist.distributed_c10d

    def replace(name, wrap):
        fn = getattr(c10d, name, None)
        if not callable(fn):
            return
        wrapped = wrap(fn)
        setattr(c10d, name, wrapped)
        # torch.distributed re-exports them: the script calls that name, torch's own modules either.
        if getattr(dist, name, None) is fn:
            setattr(dist, name, wrapped)

    replace("init_process_group", lambda fn: wrap_init_process_group(fn, state))
    for name in COLLECTIVES:
        replace(name, lambda fn: wrap_collective(fn, state, hooks))


def count_inputs(torch, state, args, kwargs, integers):
    """A wrapped model's forward inputs, once per micro-batch: the first positional argument (or keyword input_ids
    or idx) gives samples, its first dimension, and when it is an integer tensor of 2 or more dimensions (token
    ids, batch x sequence), tokens, its elements. The step's own counts take these only where no DataLoader handed
    out a batch (_dtrain_instrumentation.py's step_counts): a batch is never counted twice."""
    if args:
        first = args[0]
    elif kwargs:
        first = kwargs.get("input_ids", kwargs.get("idx"))
    else:
        return
    first = first_tensor(torch, first) if first is not None else None
    if first is not None and first.ndim:
        state.forward_samples += first.shape[0]
        if first.ndim >= 2 and first.dtype in integers:
            state.forward_tokens += first.numel()


def trainable_params(module, fsdp):
    """N, the trainable parameters of a wrapped model as the script built it: FSDP's flat parameters count the
    original parameters they hold, unsharded and without padding (their _numels, or torch 1.13's
    _unpadded_unsharded_size), whatever this rank's shard is; any other parameter its numel."""
    flats = {}
    if fsdp:
        for sub in module.modules():
            handles = list(getattr(sub, "_handles", None) or ()) + [getattr(sub, "_handle", None)]
            for flat in [getattr(h, "flat_param", None) for h in handles] + [getattr(sub, "flat_param", None)]:
                if flat is not None:
                    flats[id(flat)] = flat
        for parameter in module.parameters():
            if hasattr(parameter, "_unpadded_unsharded_size"):
                flats[id(parameter)] = parameter
    if flats:
        return sum(sum(flat._numels) if getattr(flat, "_numels", None) else flat._unpadded_unsharded_size.numel()
                   for flat in flats.values() if flat.requires_grad)
    return sum(parameter.numel() for parameter in module.parameters() if parameter.requires_grad)


def count_model(torch, state, module, fsdp):
    """A wrapped model's size into the reports (state.model, replaced whole): model_params, the sum of N over the
    wrapped models; model_flops_per_token, 6N (Kaplan et al. 2020: forward and backward of a dense model, attention
    left out); device_name, the CUDA device of its parameters, else "cpu"."""
    params = trainable_params(module, fsdp)
    device = next((p.device for p in module.parameters() if p.is_cuda), None)
    name = torch.cuda.get_device_name(device) if device is not None else "cpu"
    before = state.model
    total = before.get("model_params", 0) + params
    if before.get("device_name", "cpu") != "cpu":
        name = before["device_name"]
    state.model = {"model_params": total, "model_flops_per_token": 6.0 * total, "device_name": name}


def wrap_forward(torch, state, forward, fsdp, first_call):
    """`forward`, a DDP or FSDP model's, counting its inputs (count_inputs). At a model's first forward, its size is
    counted and first_call(model) runs; a model whose first forward runs inside another wrapped model's (FSDP's
    inner units, activation checkpointing's recomputation of them) is not the script's model and counts nothing."""
    integers = token_dtypes(torch)
    inside = [False]

    def forward_counted(self, *args, **kwargs):
        if state.first_start is None:
            state.first_start = state.clock()
        if not state.on:
            return forward(self, *args, **kwargs)
        try:
            root = self.__dict__.get("_dtrain_root")
            if root is None:
                root = self.__dict__["_dtrain_root"] = not inside[0]
                if root:
                    count_model(torch, state, self, fsdp)
                first_call(self)
            if root:
                count_inputs(torch, state, args, kwargs, integers)
        except Exception as error:
            state.fail(error)
            return forward(self, *args, **kwargs)
        if inside[0] or not fsdp:
            return forward(self, *args, **kwargs)
        inside[0] = True
        try:
            return forward(self, *args, **kwargs)
        finally:
            inside[0] = False

    return functools.update_wrapper(forward_counted, forward)


def instrument_ddp(torch, state, hooks):
    """Times DDP's gradient reduction without touching it: at a DDP model's first forward, a hook on each of its
    parameters notes when backward produced that parameter's gradient. The last one is when DDP launched its last
    bucket, and the step waited from there to the end of backward(), where DDP waits for every bucket (on a GPU, from
    a CUDA event re-recorded at each hook to one at the end of backward(), read once both have passed). DDP's own
    reduction, and any communication hook the script registers, run as they would without dtrain (a Python hook of
    dtrain's would put Python callbacks on the backend's threads). Its forward also counts samples, tokens and the
    model's size (wrap_forward)."""
    ddp = torch.nn.parallel.DistributedDataParallel
    clock = state.clock

    # One of these runs for every parameter at every backward(): the CPU one is two attribute writes.
    def gradient_ready(grad):
        state.bucket_launch = clock()
        state.bucket_done = None

    if hooks is not None:
        gradient_ready = state.gradient_ready   # (the same, in C)

    def gradient_ready_on_device(grad):
        if state.on:
            try:
                if state.bucket_event is None:
                    state.bucket_event = state.cuda.Event(enable_timing=True)
                state.bucket_event.record()
            except Exception as error:
                state.fail(error)

    def hook_gradients(model):
        for parameter in model.module.parameters():
            if parameter.requires_grad:
                parameter.register_hook(gradient_ready_on_device if state.cuda is not None and
                                        parameter.is_cuda else gradient_ready)

    ddp.forward = wrap_forward(torch, state, ddp.forward, False, hook_gradients)


# FSDP's module: not imported with torch (and torch 1.13's does not import under Python 3.11 at all).
FSDP_MODULE = "torch.distributed.fsdp.fully_sharded_data_parallel"


def instrument_fsdp(torch, state, hooks):
    """FSDP's forward counts samples, tokens and the model's size as DDP's does (wrap_forward), once the script
    imported FSDP: this runs at arming and whenever an optimizer is made (_dtrain_loop_wrappers.py's
    optimizer_made), since FSDP's rule is that the optimizer is made after the model is wrapped, before its first
    forward."""
    module = sys.modules.get(FSDP_MODULE)
    fsdp = getattr(module, "FullyShardedDataParallel", None)
    if fsdp is None or getattr(fsdp.forward, "_dtrain_counted", False):
        return
    fsdp.forward = wrap_forward(torch, state, fsdp.forward, True, lambda model: None)
    fsdp.forward._dtrain_counted = True
