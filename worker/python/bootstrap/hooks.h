/* _dtrain_hooks: the PyTorch bootstrap's wrappers (sitecustomize.py) in C, for the interpreter dtrain was built with.

   In a training loop the Python wrappers cost 2.6-2.9 us a call (a Python frame, *args packing, a few attribute
   reads and writes and a clock read, all between torch's own code, which evicts the interpreter's caches): 10-12 us a
   step for the four calls of a plain loop. The same work here is a vectorcall, two clock_gettime reads and a few
   stores into a C struct: 1.6-1.9 us a call, 6.3-7.4 us a step (BENCHMARKS.md). Most of what is left is the call
   into the wrapped function, a Python function that the interpreter would otherwise have called inline. The common
   case of the step's bookkeeping (step_done) is here too; the rest of it, and everything that runs less often than
   once a step, stays in Python (_dtrain_instrumentation.py).

   State    the counters the wrappers add to (on, in_step, in_collective, in_backward, phase, data_wait, comm_wait,
            tokens, samples, forward_samples, forward_tokens, first_start, loss, scaled, bucket_launch, bucket_done,
            bucket_event, done, previous, reporter, device_events): a base class whose fields are C members, so that the bootstrap's
            _Instrumentation (_dtrain_instrumentation.py: its subclass, which adds the rest and all the logic that runs
            once a step or less, and whose __init__ sets every field) and dtrain_health's sender thread read and write
            them as attributes. gradient_ready(grad): the DDP parameter hook (bucket_launch = now, bucket_done = None).
   Hook     Hook(kind, function, state[, phase, async_position, first_tensor, tensor_type, token_dtypes]): a
            callable that wraps `function` as the bootstrap's Python wrapper of that kind does (_dtrain_loop_wrappers.py
            and _dtrain_dist_wrappers.py; see there for what each measures): KIND_STEP (an optimizer's step),
            KIND_BACKWARD (Tensor.backward), KIND_NEXT (a DataLoader iterator's __next__), KIND_COLLECTIVE (a blocking
            torch.distributed collective, CPU tensors only). It binds as a method does (a bound method object, with
            __self__ and __func__, as torch's LR schedulers expect) and has a __dict__ for functools.update_wrapper.

   The clock is CLOCK_MONOTONIC, which time.perf_counter also reads on Linux, so the times the Python side takes
   compare with these. An error inside the wrappers' own work goes to state.fail(error), which turns the
   instrumentation off (the wrappers then only call through); the wrapped function's own exceptions pass unchanged.

   Files: hooks.h (this: the two objects and what the files share), hooks.c (the module, its State and Hook types),
   hooks_calls.c (what each kind of Hook does when called). The names they share are hidden: nothing outside the
   module sees them, nor can another library's symbol of the same name take their place. */

#ifndef DTRAIN_WORKER_PYTHON_BOOTSTRAP_HOOKS_H
#define DTRAIN_WORKER_PYTHON_BOOTSTRAP_HOOKS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <time.h>

#define HOOKS_INTERNAL __attribute__((visibility("hidden")))

enum { KIND_STEP = 0, KIND_BACKWARD = 1, KIND_NEXT = 2, KIND_COLLECTIVE = 3 };

typedef struct {
  PyObject_HEAD
  char on;
  char in_step;
  char in_collective;
  char in_backward;
  double data_wait;
  double comm_wait;
  long long tokens;
  long long samples;
  long long forward_samples;
  long long forward_tokens;
  PyObject* phase;
  PyObject* first_start;
  PyObject* loss;
  PyObject* scaled;
  PyObject* bucket_launch;
  PyObject* bucket_done;
  PyObject* bucket_event;
  PyObject* done;
  PyObject* previous;
  PyObject* reporter;
  PyObject* device_events;
  PyObject* history;
} State;

/* The steps kept for the report's per-step points (_dtrain_instrumentation.py, remember): a list the sender takes. */
enum { HISTORY_STEPS = 64 };

typedef struct {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  int kind;
  PyObject* function;      /* what is wrapped */
  State* state;
  PyObject* phase;         /* KIND_COLLECTIVE: "torch.distributed.<name>" */
  Py_ssize_t async_position;  /* KIND_COLLECTIVE: async_op's position (PY_SSIZE_T_MAX: none) */
  PyObject* first_tensor;  /* KIND_NEXT: the bootstrap's first_tensor(batch), for what is not a plain container */
  PyObject* tensor_type;   /* KIND_NEXT: torch.Tensor */
  PyObject* token_dtypes;  /* KIND_NEXT: a frozenset of the integer dtypes */
  PyObject* dict;
} Hook;

/* Interned strings, made once at import (hooks.c). */
extern HOOKS_INTERNAL PyObject* s_data;
extern HOOKS_INTERNAL PyObject* s_forward;
extern HOOKS_INTERNAL PyObject* s_backward;
extern HOOKS_INTERNAL PyObject* s_optimizer;
extern HOOKS_INTERNAL PyObject* s_fail;
extern HOOKS_INTERNAL PyObject* s_step_done;
extern HOOKS_INTERNAL PyObject* s_backward_done;
extern HOOKS_INTERNAL PyObject* s_ndim;
extern HOOKS_INTERNAL PyObject* s_by_hand;
extern HOOKS_INTERNAL PyObject* s_is_cpu;
extern HOOKS_INTERNAL PyObject* s_shape;
extern HOOKS_INTERNAL PyObject* s_dtype;
extern HOOKS_INTERNAL PyObject* s_async_op;
extern HOOKS_INTERNAL PyObject* s_input_ids;
extern HOOKS_INTERNAL PyObject* s_detach;

static inline double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Replaces *slot with value (a new reference is taken). */
static inline void put(PyObject** slot, PyObject* value) {
  PyObject* old = *slot;
  Py_INCREF(value);
  *slot = value;
  Py_XDECREF(old);
}

static inline int is_none(PyObject* value) { return value == NULL || value == Py_None; }

/* The error being raised is the instrumentation's own: state.fail(error) turns it off, and the program goes on. */
HOOKS_INTERNAL void fail(State* state);

/* state.<method>(), an error of which goes to fail(). */
HOOKS_INTERNAL void call_method(State* state, PyObject* name);

/* The vectorcalls of each kind of Hook (hooks_calls.c). */
HOOKS_INTERNAL PyObject* hook_step(Hook* self, PyObject* const* args, size_t nargsf, PyObject* kwnames);
HOOKS_INTERNAL PyObject* hook_backward(Hook* self, PyObject* const* args, size_t nargsf, PyObject* kwnames);
HOOKS_INTERNAL PyObject* hook_next(Hook* self, PyObject* const* args, size_t nargsf, PyObject* kwnames);
HOOKS_INTERNAL PyObject* hook_collective(Hook* self, PyObject* const* args, size_t nargsf, PyObject* kwnames);

#endif
