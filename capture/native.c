/* capture.native: the two loops of pcap reading that numpy cannot express without a
 * Python step or an index per byte.
 *
 * - pcap_walk: the pcap record chain. Each record's length says where the next one
 *   starts, so finding the records is sequential by nature; in Python it was one
 *   interpreted step per packet.
 * - join_spans: byte spans of a buffer copied back to back (payloads into a stream); in
 *   numpy it needs an index per 8-byte word.
 *
 * Both take and fill buffers the caller allocated (numpy arrays, bytes), check every
 * bound before touching memory, and never keep a reference. Only the Python C API is
 * used (no numpy headers), so building needs a C compiler and Python's headers alone.
 * capture/source.py and capture/_spans.py hold the same loops in Python and numpy; they
 * run when this module is not built, and the tests compare the two.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static int
get_buffer(PyObject *obj, Py_buffer *view, int writable, const char *what)
{
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0) {
        PyErr_Format(PyExc_TypeError, "%s: a contiguous%s buffer is needed", what,
                     writable ? " writable" : "");
        return -1;
    }
    return 0;
}

static uint32_t
read_u32(const unsigned char *p, int big_endian)
{
    if (big_endian)
        return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
    return ((uint32_t)p[3] << 24) | ((uint32_t)p[2] << 16) | ((uint32_t)p[1] << 8) | p[0];
}

PyDoc_STRVAR(pcap_walk_doc,
"pcap_walk(buf, off, max_len, big_endian, out) -> (count, off, corrupt)\n\n"
"Follow pcap records from byte ``off`` of ``buf``: each whole record's offset goes into\n"
"``out`` (int64, room for one per 16 bytes). Stops at the first record not wholly in\n"
"``buf`` (corrupt False) or whose captured length exceeds ``max_len`` (corrupt True);\n"
"``off`` is where it stopped.");

static PyObject *
pcap_walk(PyObject *self, PyObject *args)
{
    PyObject *buf_obj, *out_obj;
    Py_ssize_t off;
    unsigned long long max_len;
    int big_endian;
    if (!PyArg_ParseTuple(args, "OnKpO:pcap_walk", &buf_obj, &off, &max_len, &big_endian, &out_obj))
        return NULL;
    Py_buffer buf, out;
    if (get_buffer(buf_obj, &buf, 0, "buf") < 0)
        return NULL;
    if (get_buffer(out_obj, &out, 1, "out") < 0) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    const unsigned char *data = (const unsigned char *)buf.buf;
    Py_ssize_t n = buf.len;
    int64_t *offsets = (int64_t *)out.buf;
    Py_ssize_t room = out.len / (Py_ssize_t)sizeof(int64_t);
    Py_ssize_t count = 0;
    int corrupt = 0;
    if (off < 0 || off > n) {
        PyBuffer_Release(&buf);
        PyBuffer_Release(&out);
        PyErr_Format(PyExc_ValueError, "off %zd is outside buf of %zd bytes", off, n);
        return NULL;
    }
    while (off <= n - 16) {
        uint32_t cap = read_u32(data + off + 8, big_endian);
        if (cap > max_len) {
            corrupt = 1;
            break;
        }
        if ((Py_ssize_t)cap > n - 16 - off)
            break;
        if (count >= room) {
            PyBuffer_Release(&buf);
            PyBuffer_Release(&out);
            PyErr_SetString(PyExc_ValueError, "out has no room for another record offset");
            return NULL;
        }
        offsets[count++] = off;
        off += 16 + (Py_ssize_t)cap;
    }
    PyBuffer_Release(&buf);
    PyBuffer_Release(&out);
    return Py_BuildValue("nnO", count, off, corrupt ? Py_True : Py_False);
}

PyDoc_STRVAR(join_spans_doc,
"join_spans(data, start, length, out) -> None\n\n"
"Copy ``data[start[i] : start[i] + length[i]]`` for every i back to back into ``out``\n"
"(``start`` and ``length`` int64, as many of each; ``out`` at least their sum long).");

static PyObject *
join_spans(PyObject *self, PyObject *args)
{
    PyObject *data_obj, *start_obj, *length_obj, *out_obj;
    if (!PyArg_ParseTuple(args, "OOOO:join_spans", &data_obj, &start_obj, &length_obj, &out_obj))
        return NULL;
    Py_buffer data, start, length, out;
    if (get_buffer(data_obj, &data, 0, "data") < 0)
        return NULL;
    if (get_buffer(start_obj, &start, 0, "start") < 0)
        goto release_data;
    if (get_buffer(length_obj, &length, 0, "length") < 0)
        goto release_start;
    if (get_buffer(out_obj, &out, 1, "out") < 0)
        goto release_length;

    Py_ssize_t spans = start.len / (Py_ssize_t)sizeof(int64_t);
    if (length.len != start.len) {
        PyErr_SetString(PyExc_ValueError, "start and length differ in size");
        goto fail;
    }
    const int64_t *s = (const int64_t *)start.buf, *l = (const int64_t *)length.buf;
    const unsigned char *src = (const unsigned char *)data.buf;
    unsigned char *dst = (unsigned char *)out.buf;
    int64_t at = 0;
    /* Every bound first, so that a bad span changes nothing. */
    for (Py_ssize_t i = 0; i < spans; i++) {
        if (l[i] == 0)
            continue;  /* an empty span reads nothing, wherever it starts */
        if (s[i] < 0 || l[i] < 0 || l[i] > data.len || s[i] > data.len - l[i]) {
            PyErr_Format(PyExc_ValueError, "span %zd (%lld, %lld) is outside data of %zd bytes", i,
                         (long long)s[i], (long long)l[i], data.len);
            goto fail;
        }
        if (l[i] > out.len - at) {
            PyErr_SetString(PyExc_ValueError, "out is shorter than the spans");
            goto fail;
        }
        at += l[i];
    }
    Py_BEGIN_ALLOW_THREADS
    at = 0;
    for (Py_ssize_t i = 0; i < spans; i++) {
        if (l[i])
            memcpy(dst + at, src + s[i], (size_t)l[i]);
        at += l[i];
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&out);
    PyBuffer_Release(&length);
    PyBuffer_Release(&start);
    PyBuffer_Release(&data);
    Py_RETURN_NONE;

fail:
    PyBuffer_Release(&out);
release_length:
    PyBuffer_Release(&length);
release_start:
    PyBuffer_Release(&start);
release_data:
    PyBuffer_Release(&data);
    return NULL;
}

static PyMethodDef methods[] = {
    {"pcap_walk", pcap_walk, METH_VARARGS, pcap_walk_doc},
    {"join_spans", join_spans, METH_VARARGS, join_spans_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "capture.native",
    "Compiled loops of pcap reading (record walk, span join); see capture/native.c.",
    -1,
    methods,
};

PyMODINIT_FUNC
PyInit_native(void)
{
    return PyModule_Create(&module);
}
