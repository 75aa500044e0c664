/* _dtrain_hooks, the module (see hooks.h): its interned strings, the State type (the counters) and the Hook type
   (one wrapper), whose calls are hooks_calls.c's. */

#include "hooks.h"

#include <structmember.h>

/* Interned strings, made once at import. */
PyObject* s_data;
PyObject* s_forward;
PyObject* s_backward;
PyObject* s_optimizer;
PyObject* s_fail;
PyObject* s_step_done;
PyObject* s_backward_done;
PyObject* s_ndim;
PyObject* s_by_hand;
PyObject* s_is_cpu;
PyObject* s_shape;
PyObject* s_dtype;
PyObject* s_async_op;
PyObject* s_input_ids;
PyObject* s_detach;

void fail(State* state) {
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

void call_method(State* state, PyObject* name) {
  PyObject* result = PyObject_CallMethodNoArgs((PyObject*)state, name);
  if (result == NULL) fail(state);
  Py_XDECREF(result);
}

static int State_traverse(State* self, visitproc visit, void* arg) {
  Py_VISIT(self->loss);
  Py_VISIT(self->scaled);
  Py_VISIT(self->bucket_event);
  Py_VISIT(self->done);
  Py_VISIT(self->previous);
  Py_VISIT(self->history);
  Py_VISIT(self->reporter);
  Py_VISIT(self->device_events);
  return 0;
}

static int State_clear(State* self) {
  Py_CLEAR(self->loss);
  Py_CLEAR(self->scaled);
  Py_CLEAR(self->bucket_event);
  Py_CLEAR(self->done);
  Py_CLEAR(self->previous);
  Py_CLEAR(self->history);
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

/* DDP's parameter hook (_dtrain_dist_wrappers.py's instrument_ddp): the gradient of one parameter is ready, so DDP
   may have launched a bucket now. One runs for every parameter at every backward(). */
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
    {"in_backward", T_BOOL, offsetof(State, in_backward), 0, "inside a noted backward()"},
    {"data_wait", T_DOUBLE, offsetof(State, data_wait), 0, "seconds inside DataLoader iterators"},
    {"comm_wait", T_DOUBLE, offsetof(State, comm_wait), 0, "seconds in blocking collectives and DDP's reduction"},
    {"tokens", T_LONGLONG, offsetof(State, tokens), 0, "token ids the DataLoader handed out"},
    {"samples", T_LONGLONG, offsetof(State, samples), 0, "batch elements the DataLoader handed out"},
    {"forward_samples", T_LONGLONG, offsetof(State, forward_samples), 0, "batch elements DDP's forward took"},
    {"forward_tokens", T_LONGLONG, offsetof(State, forward_tokens), 0, "token ids DDP's forward took"},
    {"phase", T_OBJECT, offsetof(State, phase), 0, "what the training thread does now"},
    {"first_start", T_OBJECT, offsetof(State, first_start), 0, "when the first step began (None before)"},
    {"loss", T_OBJECT, offsetof(State, loss), 0, "the 0-dim tensors backward() ran from this step, summed"},
    {"scaled", T_OBJECT, offsetof(State, scaled), 0, "(weakref to a GradScaler's scaled loss, the unscaled one)"},
    {"bucket_launch", T_OBJECT, offsetof(State, bucket_launch), 0, "DDP: the last gradient's time this step"},
    {"bucket_done", T_OBJECT, offsetof(State, bucket_done), 0, "DDP: when backward() returned"},
    {"bucket_event", T_OBJECT, offsetof(State, bucket_event), 0, "CUDA: an event at the last launch"},
    {"done", T_OBJECT, offsetof(State, done), 0, "the last step counted (a tuple of the totals)"},
    {"previous", T_OBJECT, offsetof(State, previous), 0, "the step counted before it"},
    {"history", T_OBJECT, offsetof(State, history), 0, "the steps counted since the reporter last took them"},
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
      intern(&s_ndim, "ndim") < 0 || intern(&s_by_hand, "by_hand") < 0 || intern(&s_is_cpu, "is_cpu") < 0 ||
      intern(&s_shape, "shape") < 0 || intern(&s_dtype, "dtype") < 0 ||
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
