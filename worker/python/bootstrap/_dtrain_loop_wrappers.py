"""The PyTorch bootstrap's wrappers of the training loop (sitecustomize.py): optimizers' step() (steps),
Tensor.backward (the loss, the backward phase), GradScalers' scale() (the loss before scaling) and DataLoader
iterators' __next__ (data wait, tokens, samples).

Each instrument_* takes torch, the process's _Instrumentation (_dtrain_instrumentation.py) and _dtrain_hooks (None
where the C wrappers were not built for this interpreter): with _dtrain_hooks it installs its Hook of that kind, which
does the same work in C; without, the Python wrapper here. An error of a wrapper's own goes to state.fail() and never
reaches the program; the wrapped function's own exceptions pass unchanged. sitecustomize loads this file from its path
(never through sys.path) when torch is imported.
"""

import functools
import weakref

# Given by sitecustomize once the state exists: what runs whenever an optimizer is made (_dtrain_dist_wrappers.py's
# instrument_fsdp, for a script that imported FSDP after torch).
optimizer_made = None


def wrap_step(step, state, hooks):
    """`step` (an optimizer class's step), counted as one step of the loop."""
    if hooks is not None:
        counted = hooks.Hook(hooks.KIND_STEP, step, state)
        functools.update_wrapper(counted, step)
        counted._dtrain_counted = True
        return counted

    def counted_step(*args, **kwargs):
        if not state.on:
            return step(*args, **kwargs)
        if state.in_step:
            return step(*args, **kwargs)
        state.in_step = True
        state.phase = "optimizer"
        if state.bucket_launch is not None or state.bucket_event is not None:
            try:
                state.backward_done()   # (when backward ran through torch.autograd.backward, not Tensor.backward)
            except Exception as error:
                state.fail(error)
        try:
            result = step(*args, **kwargs)
        finally:
            state.in_step = False
        try:
            state.step_done()
        except Exception as error:
            state.fail(error)
        # What follows a step until the next batch or backward() is taken for the next forward.
        state.phase = "forward"
        return result

    functools.update_wrapper(counted_step, step)
    counted_step._dtrain_counted = True
    return counted_step


def instrument_optimizers(torch, state, hooks):
    """Each optimizer class's step is wrapped once, when its first instance is made (and optimizer_made runs at
    every instance)."""
    optimizer = torch.optim.Optimizer
    init = optimizer.__init__

    def counting_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        if not state.on:
            return
        try:
            cls = type(self)
            if not getattr(cls.step, "_dtrain_counted", False):
                cls.step = wrap_step(cls.step, state, hooks)
            if optimizer_made is not None:
                optimizer_made()
        except Exception as error:
            state.fail(error)

    counting_init.__wrapped__ = init
    optimizer.__init__ = counting_init


def first_tensor(torch, batch):
    """The tensor whose first dimension is `batch`'s samples: the batch itself, its first element, or a dict's
    input_ids or first value; None when there is none to look at."""
    kind = type(batch)
    if kind is torch.Tensor:
        return batch
    if kind is tuple or kind is list or (kind is not dict and isinstance(batch, (tuple, list))):
        batch = batch[0] if batch else None
    elif isinstance(batch, dict):
        batch = batch.get("input_ids", next(iter(batch.values()), None))
    return batch if isinstance(batch, torch.Tensor) else None


def token_dtypes(torch):
    """The integer dtypes a tensor of token ids can have (a set: one lookup per batch)."""
    return frozenset(getattr(torch, name) for name in ("uint8", "int8", "int16", "int32", "int64")
                     if hasattr(torch, name))


def instrument_backward(torch, state, hooks):
    """backward() notes the loss it ran from and that the step's backward phase began."""
    tensor = torch.Tensor
    backward = tensor.backward
    if hooks is not None:
        tensor.backward = functools.update_wrapper(hooks.Hook(hooks.KIND_BACKWARD, backward, state), backward)
        return

    def noting_backward(self, *args, **kwargs):
        if not state.on or state.in_backward:   # (a tensor subclass's __torch_function__ comes back in: noted once)
            return backward(self, *args, **kwargs)
        if state.first_start is None:
            state.first_start = state.clock()
        state.phase = "backward"
        state.in_backward = True
        try:
            result = backward(self, *args, **kwargs)
        finally:
            state.in_backward = False
        # After the call, detached and summed over the step's micro-batches (hooks_calls.c's note_loss says why):
        # read later, by the reporter's thread.
        try:
            if state.on:
                note_loss(state, self)
        except Exception as error:
            state.fail(error)
        if state.bucket_launch is not None or state.bucket_event is not None:
            try:
                state.backward_done()
            except Exception as error:
                state.fail(error)
        return result

    tensor.backward = functools.update_wrapper(noting_backward, backward)


def note_loss(state, tensor):
    """hooks_calls.c's note_loss: the step's loss += the unscaled loss of a GradScaler's tensor, or `tensor`'s
    value when it is 0-dim."""
    scaled = state.scaled
    if scaled is not None and scaled[0]() is tensor:
        value = scaled[1]
        state.scaled = None
    elif not tensor.ndim:
        value = tensor.detach()
    else:
        return
    loss = state.loss
    state.loss = value if loss is None else loss + value


def wrap_scale(scale, state):
    """`scale` (a GradScaler class's scale()), whose scaled loss's backward() notes the loss it was given: the value
    the script computed and prints, not loss x scale (which also changes as update() moves the scale). A weak
    reference: the scaled tensor and its graph stay the script's to free."""

    def remembering_scale(self, outputs, *args, **kwargs):
        result = scale(self, outputs, *args, **kwargs)
        if state.on and result is not outputs:
            try:
                if getattr(outputs, "ndim", None) == 0:
                    state.scaled = (weakref.ref(result), outputs.detach())
            except Exception as error:
                state.fail(error)
        return result

    functools.update_wrapper(remembering_scale, scale)
    remembering_scale._dtrain_counted = True
    return remembering_scale


def instrument_grad_scalers(torch, state, hooks):
    """Each GradScaler class's scale() (torch.cuda.amp's, and torch.amp's where it exists: the base of the CUDA one
    there) is wrapped once, when its first instance is made: a subclass with its own scale() (a stand-in for another
    device) is wrapped too. scale() runs once per micro-batch, not in the step's hot path: Python on both paths."""
    classes = []
    # (A torch without a GradScaler scales no loss: nothing is left unmeasured, and nothing is said.)
    for module in (getattr(getattr(torch, "amp", None), "grad_scaler", None),
                   getattr(getattr(getattr(torch, "cuda", None), "amp", None), "grad_scaler", None)):
        cls = getattr(module, "GradScaler", None)
        if cls is not None and cls not in classes:
            classes.append(cls)

    def wrap_init(init):
        def remembering_init(self, *args, **kwargs):
            init(self, *args, **kwargs)
            if not state.on:
                return
            try:
                kind = type(self)
                if not getattr(kind.scale, "_dtrain_counted", False):
                    kind.scale = wrap_scale(kind.scale, state)
            except Exception as error:
                state.fail(error)

        return functools.update_wrapper(remembering_init, init)

    for cls in classes:
        cls.__init__ = wrap_init(cls.__init__)


def instrument_data_loaders(torch, state, hooks):
    """Every DataLoader iterator's __next__ (single- and multi-process loaders alike) is data wait, and counts the
    samples and tokens of the batch it returns."""
    iterator = torch.utils.data.dataloader._BaseDataLoaderIter
    next_item = iterator.__next__

    clock = state.clock
    tensor = torch.Tensor
    integers = token_dtypes(torch)
    if hooks is not None:
        timed = hooks.Hook(hooks.KIND_NEXT, next_item, state, first_tensor=functools.partial(first_tensor, torch),
                           tensor_type=tensor, token_dtypes=integers)
        timed.__wrapped__ = next_item
        iterator.__next__ = timed
        return

    def timed_next(self):
        if not state.on:
            return next_item(self)
        began = clock()
        state.phase = "data"
        try:
            batch = next_item(self)
        finally:
            state.data_wait += clock() - began
            if state.first_start is None:
                state.first_start = began
        state.phase = "forward"
        # Samples: the first dimension of the batch's first tensor; token ids: its elements, when it holds
        # integers, batch x sequence.
        try:
            first = batch if type(batch) is tensor else first_tensor(torch, batch)
            if first is not None:
                shape = first.shape
                if shape:
                    state.samples += shape[0]
                    if len(shape) == 2 and first.dtype in integers:
                        state.tokens += shape[0] * shape[1]
        except Exception as error:
            state.fail(error)
        return batch

    timed_next.__wrapped__ = next_item
    iterator.__next__ = timed_next

