/* Cutting a run of JetStream deliveries out of a NATS read buffer, in C.

   The same function as herdbook/events/narrow_parser.py's _cut_py, frame for frame
   (tests/unit/test_frames_c.py compares the two over generated buffers): at ``pos``,
   while the buffer holds a whole delivery of one consumer to one inbox

       HMSG <subject> <sid> $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<dseq>.<ts>.<pending> <hdr> <size>\r\n<hdr bytes><body>\r\n
       MSG  <subject> <sid> $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<dseq>.<ts>.<pending> <size>\r\n<body>\r\n

   with stream sequences increasing, append ``(subject, sseq, body)``; return
   ``(frames, the last one's pending, where the run ends)``. ``head`` is the literal
   `` <sid> $JS.ACK.<stream>.<consumer>.`` that follows the subject. Anything else ends
   the run (the caller takes it frame by frame): another sid or consumer, a status, a
   frame not yet whole, a number of more than 19 digits. Bounds are checked before
   every read; the buffer is held (PyObject_GetBuffer) and nothing here can resize it.
   Optional: without a compiler the package installs without it and the Python
   function runs instead. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#define MAX_DIGITS 19   /* a nanosecond timestamp has 19; 10^19 - 1 < 2^64 */

/* The decimal number at p (1..MAX_DIGITS digits, before limit): its length, 0 if none
   or longer. */
static Py_ssize_t
number(const char *p, const char *limit, unsigned long long *value)
{
    Py_ssize_t n = 0;
    unsigned long long v = 0;
    while (p + n < limit && p[n] >= '0' && p[n] <= '9') {
        if (n == MAX_DIGITS)
            return 0;
        v = v * 10 + (unsigned long long)(p[n] - '0');
        n++;
    }
    *value = v;
    return n;
}

/* The number at *p followed by the byte ``then``: moves *p past both; 0 if not there. */
static int
number_then(const char **p, const char *limit, char then, unsigned long long *value)
{
    Py_ssize_t n = number(*p, limit, value);
    if (n == 0 || *p + n >= limit || (*p)[n] != then)
        return 0;
    *p += n + 1;
    return 1;
}

static PyObject *
cut(PyObject *module, PyObject *args)
{
    PyObject *buffer_obj;
    Py_ssize_t pos;
    const char *head;
    Py_ssize_t head_len;
    if (!PyArg_ParseTuple(args, "Ony#", &buffer_obj, &pos, &head, &head_len))
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(buffer_obj, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *frames = PyList_New(0);
    if (frames == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    const char *base = (const char *)view.buf;
    const Py_ssize_t size = view.len;
    const char *limit = base + size;
    unsigned long long last = 0, pending = 0;
    for (;;) {
        if (pos < 0 || pos > size)
            break;   /* not a position in the buffer: nothing to cut */
        const char *p = base + pos;
        int with_headers;
        if (limit - p >= 5 && memcmp(p, "HMSG ", 5) == 0) {
            with_headers = 1;
            p += 5;
        }
        else if (limit - p >= 4 && memcmp(p, "MSG ", 4) == 0) {
            with_headers = 0;
            p += 4;
        }
        else
            break;
        const char *subject = p;
        while (p < limit && *p != ' ' && *p != '\r' && *p != '\n')
            p++;
        Py_ssize_t subject_len = p - subject;
        if (subject_len == 0 || limit - p < head_len || memcmp(p, head, head_len) != 0)
            break;
        p += head_len;
        unsigned long long ignored, seq, more, header_size = 0, data_size;
        if (!number_then(&p, limit, '.', &ignored)       /* delivered */
            || !number_then(&p, limit, '.', &seq)        /* stream sequence */
            || !number_then(&p, limit, '.', &ignored)    /* consumer sequence */
            || !number_then(&p, limit, '.', &ignored)    /* timestamp */
            || !number_then(&p, limit, ' ', &more))      /* pending */
            break;
        if (with_headers && !number_then(&p, limit, ' ', &header_size))
            break;
        if (!number_then(&p, limit, '\r', &data_size) || p >= limit || *p != '\n')
            break;
        p++;
        Py_ssize_t start = p - base;
        if (data_size > (unsigned long long)(size - start) || seq <= last)
            break;   /* not whole yet, or a new consumer starting over */
        Py_ssize_t end = start + (Py_ssize_t)data_size;   /* <= size: no overflow */
        if (end + 2 > size)
            break;
        Py_ssize_t body_start = end;   /* headers longer than the message: an empty body */
        if (header_size <= data_size)
            body_start = start + (Py_ssize_t)header_size;
        PyObject *frame = PyTuple_New(3);
        if (frame == NULL)
            goto error;
        /* the body a bytearray, as the Python function's slice of the buffer */
        PyObject *items[3] = {
            PyBytes_FromStringAndSize(subject, subject_len),
            PyLong_FromUnsignedLongLong(seq),
            PyByteArray_FromStringAndSize(base + body_start, end - body_start),
        };
        for (int i = 0; i < 3; i++)
            PyTuple_SET_ITEM(frame, i, items[i]);   /* NULL allowed: DECREF skips it */
        if (items[0] == NULL || items[1] == NULL || items[2] == NULL) {
            Py_DECREF(frame);
            goto error;
        }
        int appended = PyList_Append(frames, frame);
        Py_DECREF(frame);
        if (appended < 0)
            goto error;
        last = seq;
        pending = more;
        pos = end + 2;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(NKn)", frames, pending, pos);
error:
    PyBuffer_Release(&view);
    Py_DECREF(frames);
    return NULL;
}

static PyMethodDef methods[] = {
    {"cut", cut, METH_VARARGS,
     "cut(buffer, pos, head) -> (frames, pending, end): a run of deliveries (see the "
     "module's source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "herdbook.events._frames",
    "Cutting runs of JetStream deliveries out of a read buffer (backlog_reader).", -1,
    methods,
};

PyMODINIT_FUNC
PyInit__frames(void)
{
    return PyModule_Create(&module);
}
