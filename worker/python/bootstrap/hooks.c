/* _dtrain_hooks: the PyTorch bootstrap's wrappers (sitecustomize.py) in C, for the interpreter dtrain was built with.

   In a training loop the Python wrappers cost 2.6-2.9 us a call (a Python frame, *args packing, a few attribute
   reads and writes and a clock read, all between torch's own code, which evicts the interpreter's caches): 10-12 us a
   step for the four calls of a plain loop. The same work here is a vectorcall, two clock_gettime reads and a few
   stores into a C struct: 1.6-1.9 us a call, 6.3-7.4 us a step (BENCHMARKS.md). Most of what is left is the call
   into the wrapped function, a Python function that the interpreter would otherwise have called inline. The common
   case of the step's bookkeeping (step_done) is here too; the rest of it, and everything that runs less often than
   once a step, stays in sitecustomize.py.

   State    the counters the wrappers add to (on, in_step, in_collective, phase, data_wait, comm_wait, tokens,
            samples, forward_samples, first_start, loss, bucket_launch, bucket_done, bucket_event, done, previous,
            reporter, device_events): a base class whose fields are C members, so that sitecustomize's
            _Instrumentation (its subclass, which adds the rest and all the logic that runs once a step or less, and
            whose __init__ sets every field) and dtrain_health's sender thread read and write them as attributes.
            gradient_ready(grad): the DDP parameter hook (bucket_launch = now, bucket_done = None).
   Hook     Hook(kind, function, state[, phase, async_position, first_tensor, tensor_type, token_dtypes]): a
            callable that wraps `function` as sitecustomize's Python wrapper of that kind does (see there for what
            each measures): KIND_STEP (an optimizer's step), KIND_BACKWARD (Tensor.backward), KIND_NEXT (a DataLoader
            iterator's __next__), KIND_COLLECTIVE (a blocking torch.distributed collective, CPU tensors only). It
            binds as a method does (a bound method object, with __self__ and __func__, as torch's LR schedulers
            expect) and has a __dict__ for functools.update_wrapper.

   The clock is CLOCK_MONOTONIC, which time.perf_counter also reads on Linux, so the times the Python side takes
   compare with these. An error inside the wrappers' own work goes to state.fail(error), which turns the
   instrumentation off (the wrappers then only call through); the wrapped function's own exceptions pass unchanged. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <time.h>

enum { KIND_STEP = 0, KIND_BACKWARD = 1, KIND_NEXT = 2, KIND_COLLECTIVE = 3 };

typedef struct {
  PyObject_HEAD
  char on;
  char in_step;
  char in_collective;
  double data_wait;
  double comm_wait;
  long long tokens;
  long long samples;
  long long forward_samples;
  PyObject* phase;
  PyObject* first_start;
  PyObject* loss;
  PyObject* bucket_launch;
  PyObject* bucket_done;
  PyObject* bucket_event;
  PyObject* done;
  PyObject* previous;
  PyObject* reporter;
  PyObject* device_events;
} State;

/* Interned strings, made once at import. */
static PyObject* s_data;
static PyObject* s_forward;
static PyObject* s_backward;
static PyObject* s_optimizer;
static PyObject* s_fail;
static PyObject* s_step_done;
static PyObject* s_backward_done;
static PyObject* s_ndim;
static PyObject* s_by_hand;
static PyObject* s_is_cpu;
static PyObject* s_shape;
static PyObject* s_dtype;
static PyObject* s_async_op;
static PyObject* s_input_ids;
static PyObject* s_detach;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Replaces *slot with value (a new reference is taken). */
static void put(PyObject** slot, PyObject* value) {
  PyObject* old = *slot;
  Py_INCREF(value);
  *slot = value;
  Py_XDECREF(old);
}

static int is_none(PyObject* value) { return value == NULL || value == Py_None; }

/* The error being raised is the instrumentation's own: state.fail(error) turns it off, and the program goes on. */
static void fail(State* state) {
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  PyErr_NormalizeException(&type, &value, &traceback);
  PyObject* result = value != NULL ? PyObject_CallMethodOneArg((PyObject*)state, s_fail, value) : NULL;
  if (result == NULL) {
    PyErr_Clear();
    state->on = 0;
  }
  Py_XDECREF(result);
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(traceback);
}

/* state.<method>(), an error of which goes to fail(). */
static void call_method(State* state, PyObject* name) {
  PyObject* result = PyObject_CallMethodNoArgs((PyObject*)state, name);
  if (result == NULL) fail(state);
  Py_XDECREF(result);
}

static int State_traverse(State* self, visitproc visit, void* arg) {
  Py_VISIT(self->loss);
  Py_VISIT(self->bucket_event);
  Py_VISIT(self->done);
  Py_VISIT(self->previous);
  Py_VISIT(self->reporter);
  Py_VISIT(self->device_events);
  return 0;
}

static int State_clear(State* self) {
  Py_CLEAR(self->loss);
  Py_CLEAR(self->bucket_event);
  Py_CLEAR(self->done);
  Py_CLEAR(self->previous);
  Py_CLEAR(self->reporter);
  Py_CLEAR(self->device_events);
  return 0;
}

static void State_dealloc(State* self) {
  PyObject_GC_UnTrack(self);
  State_clear(self);
  /* (Strings, floats and None: nothing the collector follows.) */
  Py_CLEAR(self->phase);
  Py_CLEAR(self->first_start);
  Py_CLEAR(self->bucket_launch);
  Py_CLEAR(self->bucket_done);
  /* (A subclass's type is released by its own dealloc, subtype_dealloc, since this base is static.) */
  Py_TYPE(self)->tp_free((PyObject*)self);
}

/* DDP's parameter hook (sitecustomize's _instrument_ddp): the gradient of one parameter is ready, so DDP may have
   launched a bucket now. One runs for every parameter at every backward(). */
static PyObject* State_gradient_ready(State* self, PyObject* grad) {
  (void)grad;
  PyObject* launched = PyFloat_FromDouble(now());
  if (launched == NULL) return NULL;
  Py_XSETREF(self->bucket_launch, launched);
  put(&self->bucket_done, Py_None);
  Py_RETURN_NONE;
}

static PyMethodDef State_methods[] = {
    {"gradient_ready", (PyCFunction)State_gradient_ready, METH_O,
     "DDP's parameter hook: bucket_launch = now, bucket_done = None."},
    {NULL, NULL, 0, NULL}};

static PyMemberDef State_members[] = {
    {"on", T_BOOL, offsetof(State, on), 0, "the switch: off, every wrapper only calls through"},
    {"in_step", T_BOOL, offsetof(State, in_step), 0, "inside a counted optimizer step"},
    {"in_collective", T_BOOL, offsetof(State, in_collective), 0, "inside a timed collective"},
    {"data_wait", T_DOUBLE, offsetof(State, data_wait), 0, "seconds inside DataLoader iterators"},
    {"comm_wait", T_DOUBLE, offsetof(State, comm_wait), 0, "seconds in blocking collectives and DDP's reduction"},
    {"tokens", T_LONGLONG, offsetof(State, tokens), 0, "token ids the DataLoader handed out"},
    {"samples", T_LONGLONG, offsetof(State, samples), 0, "batch elements the DataLoader handed out"},
    {"forward_samples", T_LONGLONG, offsetof(State, forward_samples), 0, "batch elements DDP's forward took"},
    {"phase", T_OBJECT, offsetof(State, phase), 0, "what the training thread does now"},
    {"first_start", T_OBJECT, offsetof(State, first_start), 0, "when the first step began (None before)"},
    {"loss", T_OBJECT, offsetof(State, loss), 0, "the last 0-dim tensor backward() ran from, detached"},
    {"bucket_launch", T_OBJECT, offsetof(State, bucket_launch), 0, "DDP: the last gradient's time this step"},
    {"bucket_done", T_OBJECT, offsetof(State, bucket_done), 0, "DDP: when backward() returned"},
    {"bucket_event", T_OBJECT, offsetof(State, bucket_event), 0, "CUDA: an event at the last launch"},
    {"done", T_OBJECT, offsetof(State, done), 0, "the last step counted (a tuple of the totals)"},
    {"previous", T_OBJECT, offsetof(State, previous), 0, "the step counted before it"},
    {"reporter", T_OBJECT, offsetof(State, reporter), 0, "dtrain_health's reporter"},
    {"device_events", T_OBJECT, offsetof(State, device_events), 0, "CUDA: event pairs not read yet"},
    {NULL, 0, 0, 0, NULL}};

static PyTypeObject StateType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_dtrain_hooks.State",
    .tp_basicsize = sizeof(State),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The counters of the PyTorch bootstrap's wrappers (see the module's docstring).",
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)State_dealloc,
    .tp_traverse = (traverseproc)State_traverse,
    .tp_clear = (inquiry)State_clear,
    .tp_members = State_members,
    .tp_methods = State_methods,
};

typedef struct {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  int kind;
  PyObject* function;      /* what is wrapped */
  State* state;
  PyObject* phase;         /* KIND_COLLECTIVE: "torch.distributed.<name>" */
  Py_ssize_t async_position;  /* KIND_COLLECTIVE: async_op's position (PY_SSIZE_T_MAX: none) */
  PyObject* first_tensor;  /* KIND_NEXT: sitecustomize's _first_tensor(batch), for what is not a plain container */
  PyObject* tensor_type;   /* KIND_NEXT: torch.Tensor */
  PyObject* token_dtypes;  /* KIND_NEXT: a frozenset of the integer dtypes */
  PyObject* dict;
} Hook;

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

/* The common case of sitecustomize's step_done, which runs after every optimizer step: no DDP reduction to account
   for, a step counted before, no hand-made report, no device loss or event. Then the totals as they are become
   `done` (the one before `previous`), as step_done would make them. 1 when done, 0 when step_done must run, -1 with
   an error set. The loss moves into `done`: the state holds none until the next backward(). */
static int step_done_here(State* state, double ended) {
  PyObject* done = state->done;
  if (!is_none(state->bucket_launch) || done == NULL || !PyTuple_CheckExact(done) || PyTuple_GET_SIZE(done) != 9 ||
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
  PyObject* next = Py_BuildValue("(LdddLLLOO)", steps + 1, ended, state->data_wait, state->comm_wait, state->tokens,
                                 state->samples, state->forward_samples, loss, Py_None);
  if (next == NULL) return -1;
  put(&state->previous, done);
  Py_XSETREF(state->done, next);
  Py_CLEAR(state->loss);
  return 1;
}

/* sitecustomize's counted_step. */
static PyObject* hook_step(Hook* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
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

/* The loss backward() ran from (a 0-dim tensor), detached, for the reporter's thread to read: its value, no autograd
   graph, which is the script's to free, also one that backward(retain_graph=True) keeps. -1 with an error set. */
static int note_loss(State* state, PyObject* tensor) {
  PyObject* ndim = PyObject_GetAttr(tensor, s_ndim);
  if (ndim == NULL) return -1;
  int scalar = PyLong_Check(ndim) && PyLong_AsLong(ndim) == 0;
  Py_DECREF(ndim);
  if (!scalar) return 0;
  PyObject* detached = PyObject_CallMethodNoArgs(tensor, s_detach);
  if (detached == NULL) return -1;
  Py_XSETREF(state->loss, detached);
  return 0;
}

/* sitecustomize's noting_backward. */
static PyObject* hook_backward(Hook* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  State* state = self->state;
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (!state->on || nargs < 1) return call_through(self, args, nargsf, kwnames);
  if (is_none(state->first_start)) {
    PyObject* began = PyFloat_FromDouble(now());
    if (began == NULL) fail(state); else Py_XSETREF(state->first_start, began);
  }
  put(&state->phase, s_backward);
  PyObject* result = call_through(self, args, nargsf, kwnames);
  if (result == NULL) return NULL;
  /* After the call: a tensor subclass with __torch_function__ comes back into this wrapper from inside it, with
     torch functions off, where detach() makes a plain tensor; the outer call, last, keeps the subclass. */
  if (state->on && note_loss(state, args[0]) < 0) fail(state);
  if (!is_none(state->bucket_launch) || !is_none(state->bucket_event)) call_method(state, s_backward_done);
  return result;
}

/* sitecustomize's _first_tensor: the tensor whose first dimension is the batch's samples, as a new reference; NULL
   with no error set when there is none, NULL with an error set on failure. */
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

/* sitecustomize's timed_next. */
static PyObject* hook_next(Hook* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
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

/* sitecustomize's timed_collective, for a torch without CUDA (a CUDA torch gets the Python one: CUDA events). */
static PyObject* hook_collective(Hook* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
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

static PyObject* Hook_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  static char* names[] = {"kind", "function", "state", "phase", "async_position", "first_tensor", "tensor_type",
                          "token_dtypes", NULL};
  int kind;
  PyObject *function, *state, *phase = Py_None, *first_tensor = Py_None, *tensor_type = Py_None,
                              *token_dtypes = Py_None;
  Py_ssize_t async_position = PY_SSIZE_T_MAX;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iOO!|OnOOO", names, &kind, &function, &StateType, &state, &phase,
                                   &async_position, &first_tensor, &tensor_type, &token_dtypes))
    return NULL;
  if (!PyCallable_Check(function)) return PyErr_Format(PyExc_TypeError, "Hook: the function is not callable");
  vectorcallfunc call;
  switch (kind) {
    case KIND_STEP: call = (vectorcallfunc)hook_step; break;
    case KIND_BACKWARD: call = (vectorcallfunc)hook_backward; break;
    case KIND_NEXT:
      if (!PyCallable_Check(first_tensor) || !PyType_Check(tensor_type) || !PyAnySet_Check(token_dtypes))
        return PyErr_Format(PyExc_TypeError, "Hook: KIND_NEXT needs first_tensor, tensor_type and token_dtypes");
      call = (vectorcallfunc)hook_next;
      break;
    case KIND_COLLECTIVE:
      if (!PyUnicode_Check(phase)) return PyErr_Format(PyExc_TypeError, "Hook: KIND_COLLECTIVE needs its phase");
      if (async_position < 0) return PyErr_Format(PyExc_ValueError, "Hook: async_position is negative");
      call = (vectorcallfunc)hook_collective;
      break;
    default: return PyErr_Format(PyExc_ValueError, "Hook: unknown kind %d", kind);
  }
  Hook* self = (Hook*)type->tp_alloc(type, 0);
  if (self == NULL) return NULL;
  self->vectorcall = call;
  self->kind = kind;
  self->async_position = async_position;
  Py_INCREF(function);
  self->function = function;
  Py_INCREF(state);
  self->state = (State*)state;
  Py_INCREF(phase);
  self->phase = phase;
  Py_INCREF(first_tensor);
  self->first_tensor = first_tensor;
  Py_INCREF(tensor_type);
  self->tensor_type = tensor_type;
  Py_INCREF(token_dtypes);
  self->token_dtypes = token_dtypes;
  return (PyObject*)self;
}

static int Hook_traverse(Hook* self, visitproc visit, void* arg) {
  Py_VISIT(self->function);
  Py_VISIT(self->state);
  Py_VISIT(self->phase);
  Py_VISIT(self->first_tensor);
  Py_VISIT(self->tensor_type);
  Py_VISIT(self->token_dtypes);
  Py_VISIT(self->dict);
  return 0;
}

static int Hook_clear(Hook* self) {
  Py_CLEAR(self->function);
  Py_CLEAR(self->state);
  Py_CLEAR(self->phase);
  Py_CLEAR(self->first_tensor);
  Py_CLEAR(self->tensor_type);
  Py_CLEAR(self->token_dtypes);
  Py_CLEAR(self->dict);
  return 0;
}

static void Hook_dealloc(Hook* self) {
  PyObject_GC_UnTrack(self);
  Hook_clear(self);
  Py_TYPE(self)->tp_free((PyObject*)self);
}

/* As a function's: on a class, a Hook binds to the instance as a method. */
static PyObject* Hook_descr_get(PyObject* self, PyObject* instance, PyObject* owner) {
  (void)owner;
  if (instance == NULL || instance == Py_None) {
    Py_INCREF(self);
    return self;
  }
  return PyMethod_New(self, instance);
}

static PyObject* Hook_get_wrapped_function(Hook* self, void* closure) {
  (void)closure;
  Py_INCREF(self->function);
  return self->function;
}

static PyGetSetDef Hook_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {"function", (getter)Hook_get_wrapped_function, NULL, "what the hook wraps", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject HookType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "_dtrain_hooks.Hook",
    .tp_basicsize = sizeof(Hook),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_doc = "One of the PyTorch bootstrap's wrappers (see the module's docstring).",
    .tp_new = Hook_new,
    .tp_dealloc = (destructor)Hook_dealloc,
    .tp_traverse = (traverseproc)Hook_traverse,
    .tp_clear = (inquiry)Hook_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Hook, vectorcall),
    .tp_descr_get = Hook_descr_get,
    .tp_dictoffset = offsetof(Hook, dict),
    .tp_getset = Hook_getset,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_dtrain_hooks",
                                    "The PyTorch bootstrap's wrappers in C (see hooks.c).", -1, NULL, NULL, NULL,
                                    NULL, NULL};

static int intern(PyObject** slot, const char* text) {
  *slot = PyUnicode_InternFromString(text);
  return *slot == NULL ? -1 : 0;
}

PyMODINIT_FUNC PyInit__dtrain_hooks(void) {
  if (intern(&s_data, "data") < 0 || intern(&s_forward, "forward") < 0 || intern(&s_backward, "backward") < 0 ||
      intern(&s_optimizer, "optimizer") < 0 || intern(&s_fail, "fail") < 0 ||
      intern(&s_step_done, "step_done") < 0 || intern(&s_backward_done, "backward_done") < 0 ||
      intern(&s_ndim, "ndim") < 0 || intern(&s_by_hand, "by_hand") < 0 || intern(&s_is_cpu, "is_cpu") < 0 || intern(&s_shape, "shape") < 0 || intern(&s_dtype, "dtype") < 0 ||
      intern(&s_async_op, "async_op") < 0 || intern(&s_input_ids, "input_ids") < 0 || intern(&s_detach, "detach") < 0)
    return NULL;
  if (PyType_Ready(&StateType) < 0 || PyType_Ready(&HookType) < 0) return NULL;
  PyObject* m = PyModule_Create(&module);
  if (m == NULL) return NULL;
  Py_INCREF(&StateType);
  Py_INCREF(&HookType);
  if (PyModule_AddObject(m, "State", (PyObject*)&StateType) < 0 ||
      PyModule_AddObject(m, "Hook", (PyObject*)&HookType) < 0 ||
      PyModule_AddIntConstant(m, "KIND_STEP", KIND_STEP) < 0 ||
      PyModule_AddIntConstant(m, "KIND_BACKWARD", KIND_BACKWARD) < 0 ||
      PyModule_AddIntConstant(m, "KIND_NEXT", KIND_NEXT) < 0 ||
      PyModule_AddIntConstant(m, "KIND_COLLECTIVE", KIND_COLLECTIVE) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
