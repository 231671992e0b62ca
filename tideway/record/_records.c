/* The fast path of tideway.record.batch._decode_record_section, in C.
 *
 * decode_record_section(data, base_offset, base_timestamp, count, record_type)
 * returns the list of record_type(offset, timestamp_ms, key, value, headers)
 * for the first ``count`` records of a batch's (uncompressed) records section,
 * exactly as the Python decoder does, or None when the section is anything
 * but well formed (a varint cut short or wider than 64 bits, a length that
 * overruns, a header name that is not UTF-8, an offset past 64 bits...): the
 * caller then decodes it in Python, which gives the precise result or error.
 * So this file decides nothing about malformed input; every read is bounds
 * checked all the same, since the bytes come from tenants.
 *
 * The Python decoder (about 2 us a record here) is a queue's and a
 * consumer's hot path: a broker delivering from a queue decodes every record
 * it puts in the window. This one takes about a tenth of that.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* A zigzag varint at *pos (at most 64 bits); 0 if cut short or wider. */
static inline int
read_varint(const unsigned char *data, Py_ssize_t end, Py_ssize_t *pos, int64_t *out)
{
    uint64_t unsigned_value = 0;
    int shift = 0;
    Py_ssize_t position = *pos;
    for (;;) {
        if (position >= end)
            return 0;
        unsigned char byte = data[position++];
        if (shift == 63 && (byte & 0x7E))
            return 0; /* bits past the 64th: Python's decoder makes a big int of it */
        unsigned_value |= (uint64_t)(byte & 0x7F) << shift;
        if (!(byte & 0x80))
            break;
        shift += 7;
        if (shift > 63)
            return 0;
    }
    *pos = position;
    *out = (int64_t)(unsigned_value >> 1) ^ -(int64_t)(unsigned_value & 1);
    return 1;
}

/* A length-prefixed bytes field (a negative length is None); NULL with no error set if it overruns ``limit``. */
static inline PyObject *
read_bytes(const unsigned char *data, Py_ssize_t limit, Py_ssize_t *pos, int64_t length)
{
    if (length < 0)
        Py_RETURN_NONE;
    if (length > limit - *pos)
        return NULL;
    PyObject *value = PyBytes_FromStringAndSize((const char *)data + *pos, (Py_ssize_t)length);
    *pos += (Py_ssize_t)length;
    return value;
}

#define BAIL 1   /* not well formed: the caller decodes in Python */
#define FAILED 2 /* a Python error is set (memory) */

static int
read_headers(const unsigned char *data, Py_ssize_t record_end, Py_ssize_t position, PyObject **out)
{
    int64_t count;
    if (!read_varint(data, record_end, &position, &count) || count < 0 || count > record_end - position)
        return BAIL;
    PyObject *headers = PyTuple_New((Py_ssize_t)count);
    if (headers == NULL)
        return FAILED;
    for (Py_ssize_t i = 0; i < (Py_ssize_t)count; i++) {
        int64_t name_length, value_length;
        if (!read_varint(data, record_end, &position, &name_length) || name_length < 0 || name_length > record_end - position)
            goto bail;
        PyObject *name = PyUnicode_DecodeUTF8((const char *)data + position, (Py_ssize_t)name_length, "strict");
        if (name == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
                goto failed;
            PyErr_Clear();
            goto bail;
        }
        position += (Py_ssize_t)name_length;
        if (!read_varint(data, record_end, &position, &value_length)) {
            Py_DECREF(name);
            goto bail;
        }
        PyObject *value = read_bytes(data, record_end, &position, value_length);
        if (value == NULL) {
            Py_DECREF(name);
            if (PyErr_Occurred())
                goto failed;
            goto bail;
        }
        PyObject *pair = PyTuple_Pack(2, name, value);
        Py_DECREF(name);
        Py_DECREF(value);
        if (pair == NULL)
            goto failed;
        PyTuple_SET_ITEM(headers, i, pair);
    }
    *out = headers;
    return 0;
bail:
    Py_DECREF(headers);
    return BAIL;
failed:
    Py_DECREF(headers);
    return FAILED;
}

static PyObject *
decode_record_section(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "decode_record_section(data, base_offset, base_timestamp, count, record_type)");
        return NULL;
    }
    if (!PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "data must be bytes");
        return NULL;
    }
    int overflow_offset = 0, overflow_timestamp = 0;
    long long base_offset = PyLong_AsLongLongAndOverflow(args[1], &overflow_offset);
    long long base_timestamp = PyLong_AsLongLongAndOverflow(args[2], &overflow_timestamp);
    long count = PyLong_AsLong(args[3]);
    if (PyErr_Occurred())
        return NULL;
    if (overflow_offset || overflow_timestamp)
        Py_RETURN_NONE;
    PyObject *record_type = args[4];
    const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t end = PyBytes_GET_SIZE(args[0]);
    if (count <= 0)
        return PyList_New(0);
    if (count > end / 7)
        Py_RETURN_NONE; /* a record takes 7 bytes at least: cut short */
    PyObject *records = PyList_New((Py_ssize_t)count);
    if (records == NULL)
        return NULL;
    Py_ssize_t position = 0;
    for (Py_ssize_t i = 0; i < (Py_ssize_t)count; i++) {
        int64_t length, timestamp_delta, offset_delta, key_length, value_length, offset, timestamp;
        PyObject *key = NULL, *value = NULL, *headers = NULL;
        if (!read_varint(data, end, &position, &length))
            goto bail;
        if (length < 0 || length > end - position)
            goto bail;
        Py_ssize_t record_end = position + (Py_ssize_t)length;
        position += 1; /* attributes */
        if (!read_varint(data, end, &position, &timestamp_delta) || !read_varint(data, end, &position, &offset_delta)
            || !read_varint(data, end, &position, &key_length))
            goto bail;
        key = read_bytes(data, end, &position, key_length);
        if (key == NULL)
            goto bail_or_fail;
        if (!read_varint(data, end, &position, &value_length))
            goto bail_record;
        value = read_bytes(data, end, &position, value_length);
        if (value == NULL)
            goto bail_or_fail;
        if (position >= end)
            goto bail_record;
        if (data[position] == 0) {
            headers = PyTuple_New(0);
            if (headers == NULL)
                goto fail_record;
        } else {
            int status = read_headers(data, record_end, position, &headers);
            if (status == BAIL)
                goto bail_record;
            if (status == FAILED)
                goto fail_record;
        }
        if (position >= record_end) /* record_end is within the data: its length was checked above */
            goto bail_record;
        position = record_end;
        if (__builtin_add_overflow((int64_t)base_offset, offset_delta, &offset)
            || __builtin_add_overflow((int64_t)base_timestamp, timestamp_delta, &timestamp))
            goto bail_record;
        PyObject *fields[5];
        fields[0] = PyLong_FromLongLong(offset);
        fields[1] = PyLong_FromLongLong(timestamp);
        if (fields[0] == NULL || fields[1] == NULL) {
            Py_XDECREF(fields[0]);
            Py_XDECREF(fields[1]);
            goto fail_record;
        }
        fields[2] = key;
        fields[3] = value;
        fields[4] = headers;
        PyObject *record = PyObject_Vectorcall(record_type, fields, 5, NULL);
        Py_DECREF(fields[0]);
        Py_DECREF(fields[1]);
        Py_DECREF(key);
        Py_DECREF(value);
        Py_DECREF(headers);
        if (record == NULL) {
            Py_DECREF(records);
            return NULL;
        }
        PyList_SET_ITEM(records, i, record);
        continue;
    bail_or_fail:
        if (PyErr_Occurred())
            goto fail_record;
    bail_record:
        Py_XDECREF(key);
        Py_XDECREF(value);
        Py_XDECREF(headers);
        goto bail;
    fail_record:
        Py_XDECREF(key);
        Py_XDECREF(value);
        Py_XDECREF(headers);
        Py_DECREF(records);
        return NULL;
    }
    return records;
bail:
    Py_DECREF(records); /* the slots not filled are NULL, which list_dealloc skips */
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"decode_record_section", (PyCFunction)(void (*)(void))decode_record_section, METH_FASTCALL,
     "The records of a batch's records section, or None if it is not well formed (decode it in Python then)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_records", "The record decoder's fast path (see _records.c).", -1, methods};

PyMODINIT_FUNC
PyInit__records(void)
{
    return PyModule_Create(&module);
}
