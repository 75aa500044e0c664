/* What each kind of _dtrain_hooks.Hook does when called (see hooks.h): the C versions of the bootstrap's Python
   wrappers counted_step, noting_backward and timed_next (_dtrain_loop_wrappers.py) and timed_collective
   (_dtrain_dist_wrappers.py). */

#include "hooks.h"

static PyObject* call_through(Hook* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  return PyObject_Vectorcall(self->function, args, nargsf, kwnames);
}

/* Whether the attribute `name` of `object` is true; -1 with an error set when it cannot be read. */
static int attribute_true(PyObject* object, PyObject* name) {
  PyObject* value = PyObject_GetAttr(object, name);
  if (value == NULL) return -1;
  int truth = PyObject_IsTrue(value);
  Py_DECREF(value);
  return truth;
}

/* _Instrumentation.remember: `step` joins the history the reporter takes its per-step points from; past
   HISTORY_STEPS it replaces the newest (the sender takes the list at least once a report interval). 1, or -1 with an
   error set. */
static int remember(State* state, PyObject* step) {
  PyObject* history = state->history;
  if (history == NULL || !PyList_CheckExact(history)) return 1;
  if (PyList_GET_SIZE(history) < HISTORY_STEPS) return PyList_Append(history, step) == 0 ? 1 : -1;
  Py_INCREF(step);
  return PyList_SetItem(history, HISTORY_STEPS - 1, step) == 0 ? 1 : -1;
}

/* The common case of _Instrumentation.step_done (_dtrain_instrumentation.py), which runs after every optimizer step:
   no DDP reduction to account for, a step counted before, no hand-made report, no device loss or event. Then the
   totals as they are become `done` (the one before `previous`), as step_done would make them. 1 when done, 0 when
   step_done must run, -1 with an error set. The loss moves into `done`: the state holds none until the next
   backward(). */
static int step_done_here(State* state, double ended) {
  PyObject* done = state->done;
  if (!is_none(state->bucket_launch) || done == NULL || !PyTuple_CheckExact(done) || PyTuple_GET_SIZE(done) != 10 ||
      is_none(state->reporter) || state->device_events == NULL || !PyList_CheckExact(state->device_events) ||
      PyList_GET_SIZE(state->device_events) != 0)
    return 0;
  int by_hand = attribute_true(state->reporter, s_by_hand);
  if (by_hand != 0) return by_hand < 0 ? -1 : 0;
  PyObject* loss = state->loss != NULL ? state->loss : Py_None;
  if (loss != Py_None) {
    int on_cpu = attribute_true(loss, s_is_cpu);
    if (on_cpu != 1) return on_cpu < 0 ? -1 : 0;
  }
  long long steps = PyLong_AsLongLong(PyTuple_GET_ITEM(done, 0));
  if (steps == -1 && PyErr_Occurred()) return -1;
  PyObject* next = Py_BuildValue("(LdddLLLLOO)", steps + 1, ended, state->data_wait, state->comm_wait, state->tokens,
                                 state->samples, state->forward_samples, state->forward_tokens, loss, Py_None);
  if (next == NULL) return -1;
  put(&state->previous, done);
  Py_XSETREF(state->done, next);
  Py_CLEAR(state->loss);
  return remember(state, next);
}

/* _dtrain_loop_wrappers.py's counted_step. */
PyObject* hook_step(Hook* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  State* state = self->state;
  if (!state->on || state->in_step) return call_through(self, args, nargsf, kwnames);
  state->in_step = 1;
  put(&state->phase, s_optimizer);
  /* When backward ran through torch.autograd.backward, not Tensor.backward. */
  if (!is_none(state->bucket_launch) || !is_none(state->bucket_event)) call_method(state, s_backward_done);
  PyObject* result = call_through(self, args, nargsf, kwnames);
  state->in_step = 0;
  if (result == NULL) return NULL;
  int counted = step_done_here(state, now());
  if (counted < 0) fail(state);
  else if (counted == 0) call_method(state, s_step_done);
  /* What follows a step until the next batch or backward() is taken for the next forward. */
  put(&state->phase, s_forward);
  return result;
}

/* The loss backward() ran from (a 0-dim tensor), detached, added to the step's: its value, no autograd graph, which
   is the script's to free, also one that backward(retain_graph=True) keeps. A tensor that a GradScaler's scale()
   returned adds the loss it was given (state.scaled, see _dtrain_loop_wrappers.py's instrument_grad_scalers): the
   script's loss, not loss x scale. The step's loss is their sum (with loss / K accumulation, the mean the gradient
   came from), kept as a tensor: one add per micro-batch after the first, and no value read here. -1 with an error
   set. */
static int note_loss(State* state, PyObject* tensor) {
  PyObject* value = NULL;
  PyObject* scaled = state->scaled;
  if (scaled != NULL && PyTuple_CheckExact(scaled) && PyTuple_GET_SIZE(scaled) == 2 &&
      PyWeakref_Check(PyTuple_GET_ITEM(scaled, 0)) && PyWeakref_GetObject(PyTuple_GET_ITEM(scaled, 0)) == tensor) {
    value = PyTuple_GET_ITEM(scaled, 1);
    Py_INCREF(value);
    Py_CLEAR(state->scaled);
  } else {
    PyObject* ndim = PyObject_GetAttr(tensor, s_ndim);
    if (ndim == NULL) return -1;
    int scalar = PyLong_Check(ndim) && PyLong_AsLong(ndim) == 0;
    Py_DECREF(ndim);
    if (!scalar) return 0;
    value = PyObject_CallMethodNoArgs(tensor, s_detach);
    if (value == NULL) return -1;
  }
  if (!is_none(state->loss)) {
    PyObject* sum = PyNumber_Add(state->loss, value);
    Py_DECREF(value);
    if (sum == NULL) return -1;
    value = sum;
  }
  Py_XSETREF(state->loss, value);
  return 0;
}

/* _dtrain_loop_wrappers.py's noting_backward. */
PyObject* hook_backward(Hook* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  State* state = self->state;
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  /* A tensor subclass with __torch_function__ comes back into this wrapper from inside the call: the loss is noted
     once, by the outer call (its subclass kept). */
  if (!state->on || nargs < 1 || state->in_backward) return call_through(self, args, nargsf, kwnames);
  if (is_none(state->first_start)) {
    PyObject* began = PyFloat_FromDouble(now());
    if (began == NULL) fail(state); else Py_XSETREF(state->first_start, began);
  }
  put(&state->phase, s_backward);
  state->in_backward = 1;
  PyObject* result = call_through(self, args, nargsf, kwnames);
  state->in_backward = 0;
  if (result == NULL) return NULL;
  /* After the call: a loss noted before it raised would be one the step's gradient did not come from. */
  if (state->on && note_loss(state, args[0]) < 0) fail(state);
  if (!is_none(state->bucket_launch) || !is_none(state->bucket_event)) call_method(state, s_backward_done);
  return result;
}

/* _dtrain_loop_wrappers.py's first_tensor: the tensor whose first dimension is the batch's samples, as a new
   reference; NULL with no error set when there is none, NULL with an error set on failure. */
static PyObject* first_tensor_of(Hook* self, PyObject* batch) {
  PyObject* first = batch;
  if (PyTuple_Check(batch)) {
    first = PyTuple_GET_SIZE(batch) ? PyTuple_GET_ITEM(batch, 0) : NULL;
  } else if (PyList_Check(batch)) {
    first = PyList_GET_SIZE(batch) ? PyList_GET_ITEM(batch, 0) : NULL;
  } else if (PyDict_CheckExact(batch)) {
    first = PyDict_GetItemWithError(batch, s_input_ids);
    if (first == NULL) {
      if (PyErr_Occurred()) return NULL;
      Py_ssize_t position = 0;
      PyObject* key;
      PyDict_Next(batch, &position, &key, &first);
    }
  } else if (PyDict_Check(batch)) {
    /* A dict's subclass may have its own get(). */
    PyObject* found = PyObject_CallOneArg(self->first_tensor, batch);
    if (found == Py_None) Py_CLEAR(found);
    return found;
  }
  if (first == NULL || !PyObject_TypeCheck(first, (PyTypeObject*)self->tensor_type)) return NULL;
  Py_INCREF(first);
  return first;
}

/* Samples: the first dimension of the batch's first tensor; token ids: its elements, when it holds integers, batch x
   sequence. -1 with an error set on failure. */
static int count_batch(Hook* self, PyObject* batch) {
  State* state = self->state;
  PyObject* first = Py_TYPE(batch) == (PyTypeObject*)self->tensor_type ? (Py_INCREF(batch), batch)
                                                                         : first_tensor_of(self, batch);
  if (first == NULL) return PyErr_Occurred() ? -1 : 0;
  int status = -1;
  PyObject* shape = PyObject_GetAttr(first, s_shape);
  if (shape == NULL) goto done;
  if (!PyTuple_Check(shape)) {
    status = 0;
    goto done;
  }
  Py_ssize_t rank = PyTuple_GET_SIZE(shape);
  if (rank == 0) {
    status = 0;
    goto done;
  }
  long long rows = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, 0));
  if (rows == -1 && PyErr_Occurred()) goto done;
  state->samples += rows;
  if (rank == 2) {
    PyObject* dtype = PyObject_GetAttr(first, s_dtype);
    if (dtype == NULL) goto done;
    int integer = PySet_Contains(self->token_dtypes, dtype);
    Py_DECREF(dtype);
    if (integer < 0) goto done;
    if (integer) {
      long long columns = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, 1));
      if (columns == -1 && PyErr_Occurred()) goto done;
      state->tokens += rows * columns;
    }
  }
  status = 0;
done:
  Py_XDECREF(shape);
  Py_DECREF(first);
  return status;
}

/* _dtrain_loop_wrappers.py's timed_next. */
PyObject* hook_next(Hook* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  State* state = self->state;
  if (!state->on) return call_through(self, args, nargsf, kwnames);
  double began = now();
  put(&state->phase, s_data);
  PyObject* batch = call_through(self, args, nargsf, kwnames);
  state->data_wait += now() - began;
  if (is_none(state->first_start)) {
    /* (Also when next() raised, StopIteration included, as the Python wrapper's finally does; its error is kept.) */
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyObject* start = PyFloat_FromDouble(began);
    if (start != NULL) Py_XSETREF(state->first_start, start);
    if (type != NULL) {
      PyErr_Restore(type, value, traceback);
    } else if (start == NULL) {
      Py_XDECREF(batch);
      return NULL;
    }
  }
  if (batch == NULL) return NULL;
  put(&state->phase, s_forward);
  if (count_batch(self, batch) < 0) fail(state);
  return batch;
}

static int truthy_async(Hook* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  if (nargs > self->async_position) return PyObject_IsTrue(args[self->async_position]);
  if (kwnames == NULL) return 0;
  Py_ssize_t count = PyTuple_GET_SIZE(kwnames);
  for (Py_ssize_t i = 0; i < count; ++i) {
    PyObject* name = PyTuple_GET_ITEM(kwnames, i);
    if (name == s_async_op || PyUnicode_Compare(name, s_async_op) == 0) return PyObject_IsTrue(args[nargs + i]);
  }
  return 0;
}

/* _dtrain_dist_wrappers.py's timed_collective, for a torch without CUDA (a CUDA torch gets the Python one: CUDA
   events). */
PyObject* hook_collective(Hook* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  State* state = self->state;
  if (!state->on || state->in_collective) return call_through(self, args, nargsf, kwnames);
  int async = truthy_async(self, args, PyVectorcall_NARGS(nargsf), kwnames);
  if (async != 0) {
    /* async_op=True returns at once and is not counted (an error reading it is the function's to raise). */
    if (async < 0) PyErr_Clear();
    return call_through(self, args, nargsf, kwnames);
  }
  PyObject* previous = state->phase;
  Py_XINCREF(previous);
  put(&state->phase, self->phase);
  state->in_collective = 1;
  double began = now();
  PyObject* result = call_through(self, args, nargsf, kwnames);
  state->comm_wait += now() - began;
  state->in_collective = 0;
  Py_XSETREF(state->phase, previous != NULL ? previous : (Py_INCREF(Py_None), Py_None));
  return result;
}
