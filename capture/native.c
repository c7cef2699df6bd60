/* capture.native: the loops of capture that numpy expresses only with a Python step per
 * item, an index per byte, or a pass over the whole stream per question.
 *
 * - pcap_walk: the pcap record chain. Each record's length says where the next one
 *   starts, so finding the records is sequential by nature; in Python it was one
 *   interpreted step per packet.
 * - join_spans: byte spans of a buffer copied back to back (payloads into a stream); in
 *   numpy it needs an index per 8-byte word.
 * - http_turns: whether each HTTP/1.x turn is exactly one message, and its label's bytes;
 *   in numpy a dozen passes over the stream and binary searches per turn.
 * - http_headers: where the values of a few named header fields are in each HTTP/1.x
 *   message; in numpy a pass over every byte of the stream (bodies too) and a gather per
 *   line, here only the header lines are read.
 * - traceparents, tokens: those values checked and copied into fixed-width rows (a W3C
 *   traceparent's ids, an opaque request id); numpy needs a dozen passes over a byte
 *   matrix of them.
 *
 * Both take and fill buffers the caller allocated (numpy arrays, bytes), check every
 * bound before touching memory, and never keep a reference. Only the Python C API is
 * used (no numpy headers), so building needs a C compiler and Python's headers alone.
 * capture/source.py, capture/_spans.py and capture/_http1.py hold the same work in Python
 * and numpy; it runs when this module is not built, and the tests compare the two.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* A contiguous buffer of obj; align 8 for one read as int64 (a cast pointer must be
 * aligned in C, whatever x86 tolerates). */
static int
get_buffer_aligned(PyObject *obj, Py_buffer *view, int writable, const char *what, int align)
{
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0) {
        PyErr_Format(PyExc_TypeError, "%s: a contiguous%s buffer is needed", what,
                     writable ? " writable" : "");
        return -1;
    }
    if (align > 1 && ((uintptr_t)view->buf % (uintptr_t)align != 0 || view->len % align != 0)) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_TypeError, "%s: an aligned int64 array is needed", what);
        return -1;
    }
    return 0;
}

static int
get_buffer(PyObject *obj, Py_buffer *view, int writable, const char *what)
{
    return get_buffer_aligned(obj, view, writable, what, 1);
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
    if (get_buffer_aligned(out_obj, &out, 1, "out", 8) < 0) {
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
    if (get_buffer_aligned(start_obj, &start, 0, "start", 8) < 0)
        goto release_data;
    if (get_buffer_aligned(length_obj, &length, 0, "length", 8) < 0)
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
    /* The copy reads each span once more and checks it again before using it: out may
     * share memory with start or length (a copy can change a later span), and another
     * thread may write them while the GIL is released. memmove: data and out may overlap. */
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    at = 0;
    for (Py_ssize_t i = 0; i < spans; i++) {
        int64_t si = s[i], li = l[i];
        if (li == 0)
            continue;
        if (si < 0 || li < 0 || li > data.len || si > data.len - li || li > out.len - at) {
            bad = 1;
            break;
        }
        memmove(dst + at, src + si, (size_t)li);
        at += li;
    }
    Py_END_ALLOW_THREADS
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "a span changed while it was copied (out shares memory with it?)");
        goto fail;
    }
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

/* ---- HTTP/1.x turns --------------------------------------------------------------- */

/* bytes.find(pat, from, to) for a pattern of m bytes: the first match within [from, to). */
static Py_ssize_t
find_bytes(const unsigned char *s, Py_ssize_t from, Py_ssize_t to, const char *pat, Py_ssize_t m)
{
    for (Py_ssize_t i = from; i <= to - m; i++) {
        const unsigned char *hit = memchr(s + i, pat[0], (size_t)(to - m - i + 1));
        if (hit == NULL)
            return -1;
        i = hit - s;
        if (memcmp(hit, pat, (size_t)m) == 0)
            return i;
    }
    return -1;
}

/* The same, ASCII letters of s compared as lower case (pat is lower case). */
static Py_ssize_t
find_lower(const unsigned char *s, Py_ssize_t from, Py_ssize_t to, const char *pat, Py_ssize_t m)
{
    for (Py_ssize_t i = from; i <= to - m; i++) {
        Py_ssize_t k = 0;
        while (k < m) {
            unsigned char c = s[i + k];
            if (c >= 'A' && c <= 'Z')
                c |= 0x20;
            if (c != (unsigned char)pat[k])
                break;
            k++;
        }
        if (k == m)
            return i;
    }
    return -1;
}

static const char *const TURN_METHODS[] = {"GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS",
                                           "PATCH", "CONNECT", "TRACE", NULL};

static int
is_turn_method(const unsigned char *s, Py_ssize_t len)
{
    for (int k = 0; TURN_METHODS[k] != NULL; k++)
        if ((Py_ssize_t)strlen(TURN_METHODS[k]) == len && memcmp(s, TURN_METHODS[k], (size_t)len) == 0)
            return 1;
    return 0;
}

enum { TURN_NO = 0, TURN_YES = 1, TURN_UNSURE = 2 };

/* A Content-Length value in its usual form (blanks, 1 to 18 digits, blanks), or -2 when
 * it is in another form (a sign, an underscore, other white space: Python's int() is the
 * judge of those), or -1 when int() would refuse it for sure (nothing at all). */
static long long
length_value(const unsigned char *s, Py_ssize_t a, Py_ssize_t b)
{
    while (a < b && (s[a] == ' ' || s[a] == '\t'))
        a++;
    while (b > a && (s[b - 1] == ' ' || s[b - 1] == '\t'))
        b--;
    if (a == b)
        return -1;
    if (b - a > 18)
        return -2;
    long long v = 0;
    for (Py_ssize_t i = a; i < b; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -2;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

/* One turn s[a:b] as capture._http1.check_turn sees it: TURN_YES or TURN_NO with the label
 * span [*la, *lb) (the method and path of a request, the status of a response), or
 * TURN_UNSURE where only the Python code gives the exact answer (bytes that need UTF-8
 * decoding with replacement, an unusual length value, a slice past the stream's end). */
static int
one_turn(const unsigned char *s, Py_ssize_t n, Py_ssize_t a, Py_ssize_t b, int call, Py_ssize_t *la,
         Py_ssize_t *lb)
{
    *la = *lb = -1;
    Py_ssize_t h = find_bytes(s, a, b, "\r\n\r\n", 4);
    if (h < 0)
        return TURN_NO;
    Py_ssize_t end = h + 4, eol = find_bytes(s, a, end, "\r\n", 2);
    if (eol < 0)
        return TURN_UNSURE;  /* cannot be (the blank line ends a line); never read before s */
    if (call) {
        Py_ssize_t sp = find_bytes(s, a, eol, " ", 1);
        if (sp < 0 || !is_turn_method(s + a, sp - a))
            return TURN_NO;
        Py_ssize_t pe = eol;
        for (Py_ssize_t k = eol - 6; k >= sp + 1; k--)  /* rsplit(b" HTTP/", 1) */
            if (memcmp(s + k, " HTTP/", 6) == 0) {
                pe = k;
                break;
            }
        if (pe > sp + 1 + 200)
            pe = sp + 1 + 200;
        const unsigned char *q = memchr(s + sp + 1, '?', (size_t)(pe - sp - 1));
        if (q != NULL)
            pe = q - s;
        for (Py_ssize_t k = sp + 1; k < pe; k++)
            if (s[k] >= 0x80)
                return TURN_UNSURE;
        *la = a;
        *lb = pe;
    } else {
        if (a + 12 > n)
            return TURN_UNSURE;
        if (memcmp(s + a, "HTTP/1.", 7) != 0 || s[a + 9] == '1' || memcmp(s + a + 9, "204", 3) == 0
            || memcmp(s + a + 9, "304", 3) == 0)
            return TURN_NO;
        for (int k = 9; k < 12; k++)
            if (s[a + k] < '0' || s[a + k] > '9')
                return TURN_NO;  /* a status code is three digits (the parser's rule too) */
        *la = a + 9;
        *lb = a + 12;
    }
    if (find_bytes(s, eol, end, "hunked", 6) >= 0 || find_bytes(s, eol, end, "HUNKED", 6) >= 0)
        return TURN_NO;  /* chunked: the parser's business */
    long long cl;
    Py_ssize_t i = find_bytes(s, eol, end, "\nContent-Length:", 16);
    if (i < 0)
        i = find_lower(s, eol, end, "\ncontent-length:", 16);
    if (i < 0) {
        cl = call ? 0 : -1;  /* a response without a length runs to the close */
    } else {
        Py_ssize_t j = find_bytes(s, i + 16, end, "\r", 1);
        if (j < 0)
            return TURN_UNSURE;
        cl = length_value(s, i + 16, j);
        if (cl == -2)
            return TURN_UNSURE;
    }
    return end + cl == b ? TURN_YES : TURN_NO;
}

PyDoc_STRVAR(http_turns_doc,
"http_turns(stream, lo, hi, is_call, verdict, label_lo, label_hi) -> None\n\n"
"capture._http1.check_turn for every turn stream[lo[t]:hi[t]]: ``verdict`` (uint8) 1 for\n"
"exactly one message, 0 for not, 2 where the Python code must decide; ``label_lo`` and\n"
"``label_hi`` (int64) the label's bytes (-1 when none). ``lo``, ``hi`` int64, ``is_call``\n"
"uint8 (bool), all as many.");

/* The buffers of objs (counted in *got, for release on failure too). */
static int
get_buffers(PyObject **objs, int nobj, Py_buffer *v, const char *const *names, const int *writable,
            const Py_ssize_t *item, int *got)
{
    for (*got = 0; *got < nobj; (*got)++)
        if (get_buffer_aligned(objs[*got], &v[*got], writable[*got], names[*got], (int)item[*got]) < 0)
            return -1;
    return 0;
}

static PyObject *
http_turns(PyObject *self, PyObject *args)
{
    PyObject *objs[7];
    if (!PyArg_ParseTuple(args, "OOOOOOO:http_turns", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4],
                          &objs[5], &objs[6]))
        return NULL;
    static const char *const names[7] = {"stream", "lo", "hi", "is_call", "verdict", "label_lo", "label_hi"};
    static const int writable[7] = {0, 0, 0, 0, 1, 1, 1};
    static const Py_ssize_t item[7] = {1, 8, 8, 1, 1, 8, 8};
    Py_buffer v[7];
    int got = 0;
    PyObject *result = NULL;
    if (get_buffers(objs, 7, v, names, writable, item, &got) < 0)
        goto done;
    Py_ssize_t turns = v[1].len / 8;
    for (int k = 1; k < 7; k++)
        if (v[k].len != turns * item[k]) {
            PyErr_Format(PyExc_ValueError, "%s does not hold one item per turn", names[k]);
            goto done;
        }
    const unsigned char *s = (const unsigned char *)v[0].buf;
    const int64_t *lo = (const int64_t *)v[1].buf, *hi = (const int64_t *)v[2].buf;
    const unsigned char *call = (const unsigned char *)v[3].buf;
    unsigned char *verdict = (unsigned char *)v[4].buf;
    int64_t *label_lo = (int64_t *)v[5].buf, *label_hi = (int64_t *)v[6].buf;
    /* Each turn's bounds are read once and checked where they are used, with the GIL held:
     * the outputs may share memory with lo and hi (a write can change a later turn), and no
     * other thread may change the stream while it is searched. */
    for (Py_ssize_t t = 0; t < turns; t++) {
        int64_t a = lo[t], b = hi[t];
        int is_call = call[t] != 0;
        if (a < 0 || b < a || b > v[0].len) {
            PyErr_Format(PyExc_ValueError, "turn %zd (%lld, %lld) is outside the stream of %zd bytes", t,
                         (long long)a, (long long)b, v[0].len);
            goto done;
        }
        Py_ssize_t la, lb;
        verdict[t] = (unsigned char)one_turn(s, v[0].len, a, b, is_call, &la, &lb);
        label_lo[t] = la;
        label_hi[t] = lb;
    }
    result = Py_None;
    Py_INCREF(result);
done:
    for (int k = 0; k < got; k++)
        PyBuffer_Release(&v[k]);
    return result;
}

/* ---- HTTP/1.x header fields -------------------------------------------------------- */

PyDoc_STRVAR(http_headers_doc,
"http_headers(stream, lo, hi, names, vlo, vhi) -> None\n\n"
"For every message stream[lo[t]:hi[t]] and every name of ``names`` (bytes: lower-case\n"
"field names, each followed by a line feed), where the value of the first header line of\n"
"that name is: ``vlo[t * k + j]``, ``vhi[t * k + j]`` (int64, k names; -1 when absent).\n"
"The header lines are those after the first line, up to the first empty line or hi[t];\n"
"a name matches in any case and must be followed by a colon at once; the value is the\n"
"rest of the line, blanks (space, tab) and a carriage return at its end taken off.");

static PyObject *
http_headers(PyObject *self, PyObject *args)
{
    PyObject *objs[6];
    if (!PyArg_ParseTuple(args, "OOOOOO:http_headers", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4],
                          &objs[5]))
        return NULL;
    static const char *const names[6] = {"stream", "lo", "hi", "names", "vlo", "vhi"};
    static const int writable[6] = {0, 0, 0, 0, 1, 1};
    static const Py_ssize_t item[6] = {1, 8, 8, 1, 8, 8};
    Py_buffer v[6];
    int got = 0;
    PyObject *result = NULL;
    if (get_buffers(objs, 6, v, names, writable, item, &got) < 0)
        goto done;
    /* The names: up to 32, each ending with a line feed. */
    const unsigned char *nb = (const unsigned char *)v[3].buf;
    Py_ssize_t name_at[32], name_len[32];
    int k = 0;
    for (Py_ssize_t i = 0, start = 0; i < v[3].len; i++)
        if (nb[i] == '\n') {
            if (k == 32 || i == start) {
                PyErr_SetString(PyExc_ValueError, "names: 1 to 32 non-empty names, each ending with a line feed");
                goto done;
            }
            name_at[k] = start;
            name_len[k++] = i - start;
            start = i + 1;
        }
    Py_ssize_t turns = v[1].len / 8;
    if (v[2].len != turns * 8 || v[4].len != turns * k * 8 || v[5].len != turns * k * 8) {
        PyErr_SetString(PyExc_ValueError, "lo and hi need one item per message, vlo and vhi one per name too");
        goto done;
    }
    const unsigned char *s = (const unsigned char *)v[0].buf;
    const int64_t *lo = (const int64_t *)v[1].buf, *hi = (const int64_t *)v[2].buf;
    int64_t *vlo = (int64_t *)v[4].buf, *vhi = (int64_t *)v[5].buf;
    for (Py_ssize_t t = 0; t < turns; t++) {
        int64_t a = lo[t], b = hi[t];  /* read once: the outputs may share memory with them */
        if (a < 0 || b < a || b > v[0].len) {
            PyErr_Format(PyExc_ValueError, "message %zd (%lld, %lld) is outside the stream of %zd bytes", t,
                         (long long)a, (long long)b, v[0].len);
            goto done;
        }
        int64_t *olo = vlo + t * k, *ohi = vhi + t * k;
        for (int j = 0; j < k; j++)
            olo[j] = ohi[j] = -1;
        const unsigned char *nl = memchr(s + a, '\n', (size_t)(b - a));
        int left = k;
        while (nl != NULL && left > 0) {
            Py_ssize_t ls = nl - s + 1;  /* this line's start */
            const unsigned char *next = ls < b ? memchr(s + ls, '\n', (size_t)(b - ls)) : NULL;
            Py_ssize_t le = next != NULL ? next - s : b;
            Py_ssize_t ce = le > ls && s[le - 1] == '\r' ? le - 1 : le;
            if (ce == ls)
                break;  /* the empty line: the header ends */
            const unsigned char *colon = memchr(s + ls, ':', (size_t)(ce - ls));
            if (colon != NULL) {
                Py_ssize_t nlen = colon - (s + ls);
                for (int j = 0; j < k; j++) {
                    if (olo[j] >= 0 || name_len[j] != nlen)
                        continue;
                    Py_ssize_t i = 0;
                    while (i < nlen) {
                        unsigned char c = s[ls + i];
                        if (c >= 'A' && c <= 'Z')
                            c |= 0x20;
                        if (c != nb[name_at[j] + i])
                            break;
                        i++;
                    }
                    if (i < nlen)
                        continue;
                    Py_ssize_t va = ls + nlen + 1, vb = ce;
                    while (va < vb && (s[va] == ' ' || s[va] == '\t'))
                        va++;
                    while (vb > va && (s[vb - 1] == ' ' || s[vb - 1] == '\t'))
                        vb--;
                    olo[j] = va;
                    ohi[j] = vb;
                    left--;
                    break;
                }
            }
            nl = next;
        }
    }
    result = Py_None;
    Py_INCREF(result);
done:
    for (int i = 0; i < got; i++)
        PyBuffer_Release(&v[i]);
    return result;
}

/* Whether p[0:n] are all lower-case hex digits, and (in *nonzero) not all '0'; without a
 * branch per byte, which made it three times slower. */
static int
all_lower_hex(const unsigned char *p, int n, int *nonzero)
{
    unsigned bad = 0, nz = 0;
    for (int i = 0; i < n; i++) {
        unsigned c = p[i];
        bad |= (c - '0' > 9u) & (c - 'a' > 5u);
        nz |= c ^ '0';
    }
    *nonzero = nz != 0;
    return bad == 0;
}

PyDoc_STRVAR(traceparents_doc,
"traceparents(buf, vlo, vhi, trace, span, ok) -> None\n\n"
"Check each W3C traceparent value buf[vlo[i]:vhi[i]] (int64 spans): version (two lower-case\n"
"hex digits, not ff), trace id (32), parent id (16), flags (2), dashes between; version 00\n"
"exactly 55 bytes, a later one 55 or more with a dash after the flags; neither id all\n"
"zeros. ``ok`` (uint8) 1 where valid, and then the ids into rows i of ``trace`` (32 bytes\n"
"each) and ``span`` (16).");

static PyObject *
traceparents(PyObject *self, PyObject *args)
{
    PyObject *objs[6];
    if (!PyArg_ParseTuple(args, "OOOOOO:traceparents", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &objs[5]))
        return NULL;
    static const char *const names[6] = {"buf", "vlo", "vhi", "trace", "span", "ok"};
    static const int writable[6] = {0, 0, 0, 1, 1, 1};
    static const Py_ssize_t item[6] = {1, 8, 8, 1, 1, 1};
    Py_buffer v[6];
    int got = 0;
    PyObject *result = NULL;
    if (get_buffers(objs, 6, v, names, writable, item, &got) < 0)
        goto done;
    Py_ssize_t n = v[1].len / 8;
    if (v[2].len != n * 8 || v[3].len != n * 32 || v[4].len != n * 16 || v[5].len != n) {
        PyErr_SetString(PyExc_ValueError, "vlo, vhi, ok need one item per value, trace 32 bytes, span 16");
        goto done;
    }
    const unsigned char *s = (const unsigned char *)v[0].buf;
    const int64_t *vlo = (const int64_t *)v[1].buf, *vhi = (const int64_t *)v[2].buf;
    unsigned char *trace = (unsigned char *)v[3].buf, *span = (unsigned char *)v[4].buf;
    unsigned char *ok = (unsigned char *)v[5].buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t a = vlo[i], b = vhi[i];
        if (a < 0 || b < a || b > v[0].len) {
            PyErr_Format(PyExc_ValueError, "value %zd (%lld, %lld) is outside the buffer", i, (long long)a,
                         (long long)b);
            goto done;
        }
        const unsigned char *p = s + a;
        int64_t len = b - a;
        int nz_v, nz_t, nz_s, nz_f;
        int good = len >= 55 && all_lower_hex(p, 2, &nz_v) && !(p[0] == 'f' && p[1] == 'f') && p[2] == '-'
                   && p[35] == '-' && p[52] == '-' && all_lower_hex(p + 3, 32, &nz_t)
                   && all_lower_hex(p + 36, 16, &nz_s) && all_lower_hex(p + 53, 2, &nz_f) && nz_t && nz_s;
        if (good && len != 55)
            good = nz_v && p[55] == '-';  /* only a later version may go on */
        ok[i] = (unsigned char)good;
        if (good) {
            memcpy(trace + 32 * i, p + 3, 32);
            memcpy(span + 16 * i, p + 36, 16);
        }
    }
    result = Py_None;
    Py_INCREF(result);
done:
    for (int k = 0; k < got; k++)
        PyBuffer_Release(&v[k]);
    return result;
}

PyDoc_STRVAR(tokens_doc,
"tokens(buf, vlo, vhi, out, ok) -> None\n\n"
"Check each value buf[vlo[i]:vhi[i]] (int64 spans) as an opaque token: 1 to w bytes of\n"
"printable ASCII (0x20-0x7e), w the width of ``out``'s rows (``out`` holds one row per\n"
"value, zeros). ``ok`` (uint8) 1 where it is, and then the value into its row.");

static PyObject *
tokens(PyObject *self, PyObject *args)
{
    PyObject *objs[5];
    if (!PyArg_ParseTuple(args, "OOOOO:tokens", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4]))
        return NULL;
    static const char *const names[5] = {"buf", "vlo", "vhi", "out", "ok"};
    static const int writable[5] = {0, 0, 0, 1, 1};
    static const Py_ssize_t item[5] = {1, 8, 8, 1, 1};
    Py_buffer v[5];
    int got = 0;
    PyObject *result = NULL;
    if (get_buffers(objs, 5, v, names, writable, item, &got) < 0)
        goto done;
    Py_ssize_t n = v[1].len / 8;
    if (v[2].len != n * 8 || v[4].len != n || (n > 0 && v[3].len % n != 0)) {
        PyErr_SetString(PyExc_ValueError, "vlo, vhi, ok and the rows of out need one item per value");
        goto done;
    }
    Py_ssize_t width = n > 0 ? v[3].len / n : 0;
    const unsigned char *s = (const unsigned char *)v[0].buf;
    const int64_t *vlo = (const int64_t *)v[1].buf, *vhi = (const int64_t *)v[2].buf;
    unsigned char *out = (unsigned char *)v[3].buf, *ok = (unsigned char *)v[4].buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t a = vlo[i], b = vhi[i];
        if (a < 0 || b < a || b > v[0].len) {
            PyErr_Format(PyExc_ValueError, "value %zd (%lld, %lld) is outside the buffer", i, (long long)a,
                         (long long)b);
            goto done;
        }
        int good = b > a && b - a <= width;
        unsigned bad = 0;
        for (int64_t j = a; good && j < b; j++)
            bad |= (unsigned)(s[j] - 0x20) > 0x5eu;  /* outside 0x20-0x7e */
        good = good && bad == 0;
        ok[i] = (unsigned char)good;
        if (good)
            memcpy(out + width * i, s + a, (size_t)(b - a));
    }
    result = Py_None;
    Py_INCREF(result);
done:
    for (int k = 0; k < got; k++)
        PyBuffer_Release(&v[k]);
    return result;
}

static PyMethodDef methods[] = {
    {"pcap_walk", pcap_walk, METH_VARARGS, pcap_walk_doc},
    {"join_spans", join_spans, METH_VARARGS, join_spans_doc},
    {"http_turns", http_turns, METH_VARARGS, http_turns_doc},
    {"http_headers", http_headers, METH_VARARGS, http_headers_doc},
    {"traceparents", traceparents, METH_VARARGS, traceparents_doc},
    {"tokens", tokens, METH_VARARGS, tokens_doc},
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
