"""Minimal GGUF v3 writer and reader plus the tensor encodings muser's
converter emits (F32, F16, BF16, Q8_0, NVFP4), in pure Python 3 (struct and array
only, no numpy): the converter must run on a machine with nothing but python3.

Owns: the GGUF byte layout (header, typed metadata, tensor table, 32-byte
aligned data) and the element encodings. Does not own: which keys and
tensors a model has (hf_to_gguf.py). Key design choice: tensors are carried
as raw little-endian bytes plus a ggml type; values are only materialized as
Python floats where an encoding needs arithmetic (F16, BF16 from F32, Q8_0,
NVFP4).
"""
import array, bisect, math, struct, sys

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
ALIGNMENT = 32

# metadata value types
T_U8, T_I8, T_U16, T_I16, T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR, T_U64, T_I64, T_F64 = range(13)
_SCALAR = {T_U8: "B", T_I8: "b", T_U16: "H", T_I16: "h", T_U32: "I", T_I32: "i", T_F32: "f",
           T_BOOL: "?", T_U64: "Q", T_I64: "q", T_F64: "d"}

# ggml tensor types
F32, F16, Q8_0, BF16, NVFP4 = 0, 1, 8, 30, 40
TYPE_NAMES = {F32: "F32", F16: "F16", Q8_0: "Q8_0", BF16: "BF16", NVFP4: "NVFP4"}
# llama_ftype values for general.file_type
FTYPE = {F32: 0, F16: 1, Q8_0: 7, BF16: 32, NVFP4: 39}
QK8_0 = 32
QK_NVFP4 = 64  # 4 sub-blocks of 16: 4 UE4M3 scale bytes, then 32 bytes of E2M1 codes

assert sys.byteorder == "little", "gguf.py assumes a little-endian host"


# ---------------------------------------------------------------- encodings

def f32_values(raw, src_type):
    """raw bytes of src_type (F32, F16, BF16) -> array('f')."""
    if src_type == F32:
        return array.array("f", raw)
    if src_type == BF16:
        b = bytearray(len(raw) * 2)  # bf16 is the high half of an f32
        b[2::4] = raw[0::2]
        b[3::4] = raw[1::2]
        return array.array("f", bytes(b))
    if src_type == F16:
        n = len(raw) // 2
        return array.array("f", struct.unpack("<%de" % n, raw))
    raise ValueError("gguf: cannot read element type %d as floats" % src_type)


def encode_f32(vals):
    return array.array("f", vals).tobytes()


def encode_f16(vals):
    out = bytearray()
    step = 1 << 16
    for i in range(0, len(vals), step):
        chunk = vals[i:i + step]
        try:
            out += struct.pack("<%de" % len(chunk), *chunk)
        except OverflowError:
            out += struct.pack("<%de" % len(chunk), *[max(-65504.0, min(65504.0, v)) for v in chunk])
    return bytes(out)


def encode_bf16(vals):
    """round to nearest even, like ggml's fp32 -> bf16 (NaN kept quiet)."""
    u = array.array("I", array.array("f", vals).tobytes())
    out = array.array("H", bytes(2 * len(u)))
    for i, x in enumerate(u):
        if (x & 0x7fffffff) > 0x7f800000:
            out[i] = (x >> 16) | 64
        else:
            out[i] = (x + (0x7fff + ((x >> 16) & 1))) >> 16
    return out.tobytes()


def _f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def encode_q8_0(vals):
    """ggml block_q8_0: per 32 values, d = amax/127 stored as f16 and
    q = roundf(x * (1/d)) as int8, computed in float32 like ggml's reference
    quantizer (quantize_row_q8_0_ref)."""
    n = len(vals)
    if n % QK8_0:
        raise ValueError("gguf: Q8_0 needs a multiple of 32 values per row, got %d" % n)
    out = bytearray()
    pack = struct.Struct("<e32b").pack
    floor = math.floor
    for i in range(0, n, QK8_0):
        blk = vals[i:i + QK8_0]
        amax = max(max(blk), -min(blk))
        d = _f32(amax / 127.0)
        if d:
            inv = _f32(1.0 / d)
            prod = array.array("f", [x * inv for x in blk])  # rounded to f32 like ggml
            q = [int(floor(p + 0.5)) if p >= 0 else -int(floor(-p + 0.5)) for p in prod]
        else:
            q = [0] * QK8_0
        out += pack(d, *q)
    return bytes(out)


def decode_q8_0(raw):
    vals = array.array("f")
    unpack = struct.Struct("<e32b").unpack_from
    for o in range(0, len(raw), 34):
        t = unpack(raw, o)
        d = t[0]
        vals.extend([d * q for q in t[1:]])
    return vals


# NVFP4 (ggml's block_nvfp4): E2M1 codes as doubled values, sub-block scale
# half the UE4M3 value, so value = code * scale. Values by code index.
FP4_CODES = (0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12)
# the codes ordered by value, each value at its first index (0 at index 0)
_FP4_BY_VALUE = sorted({c: i for i, c in reversed(list(enumerate(FP4_CODES)))}.items())
_FP4_IDS = [i for _, i in _FP4_BY_VALUE]


def ue4m3_half(b):
    """ggml_ue4m3_to_fp32: a scale byte -> half its UE4M3 value (bit 7
    ignored, 0x7f reads as 0)."""
    if b == 0x7f:
        return 0.0
    e, m = (b >> 3) & 15, b & 7
    return m * 2.0 ** -10 if e == 0 else (8 + m) * 2.0 ** (e - 11)


def ue4m3_from(x):
    """ggml_fp32_to_ue4m3 for a float32 value x: the mantissa rounded half up
    on one bit, clamped to 448 (0x7e), subnormals as int(x * 512 + 0.5)."""
    if not x > 0.0:
        return 0
    x = min(x, 448.0)
    (bits,) = struct.unpack("<I", struct.pack("<f", x))
    e, m = ((bits >> 23) & 0xff) - 127 + 7, (bits >> 20) & 7
    if e <= 0:
        sub = int(_f32(x * 512.0 + 0.5))
        return 0 if sub < 1 else min(sub, 7)
    if e >= 15:
        return 0x7e
    m += (bits >> 19) & 1
    if m > 7:
        m, e = 0, e + 1
        if e >= 15:
            return 0x7e
    return (e << 3) | m


def _fp4_scan(x, d):
    """ggml's best_index_mxfp4: the first code whose float32 |code * d - x|
    is smallest, all 16 compared (NaN and inf give 0)."""
    best, best_err = 0, abs(_f32(FP4_CODES[0] * d - x))
    for i in range(1, 16):
        err = abs(_f32(FP4_CODES[i] * d - x))
        if err < best_err:
            best, best_err = i, err
    return best


def _fp4_nearest(x, vs, ids):
    """The same for a finite x and a scale not clamped: only the two codes
    around x (vs: the code values ascending, ids: their first indices) can
    win, every other being at least d farther; their float32 errors decide,
    a tie goes to the lower index."""
    lo = bisect.bisect_right(vs, x) - 1
    if lo < 0:
        return ids[0]
    if lo + 1 == len(vs):
        return ids[lo]
    vl, il, vu, iu = vs[lo], ids[lo], vs[lo + 1], ids[lo + 1]
    el, eu = x - vl, vu - x
    if el * (1 + 2.0 ** -20) < eu:
        return il
    if eu * (1 + 2.0 ** -20) < el:
        return iu
    el, eu = _f32(el), _f32(eu)
    if el != eu:
        return il if el < eu else iu
    return min(il, iu)


def encode_nvfp4(vals):
    """ggml block_nvfp4, byte for byte as quantize_row_nvfp4_ref: per 16
    values the scale byte ue4m3(amax / 6), then each value's nearest code
    against the stored scale."""
    n = len(vals)
    if n % QK_NVFP4:
        raise ValueError("gguf: NVFP4 needs a multiple of 64 values per row, got %d" % n)
    out = bytearray()
    for i in range(0, n, QK_NVFP4):
        d4, qs = bytearray(4), bytearray(32)
        for s in range(4):
            xb = vals[i + 16 * s:i + 16 * s + 16]
            amax = 0.0
            for v in xb:
                if amax < abs(v):
                    amax = abs(v)
            six = _f32(amax / 6.0)
            d4[s] = ue4m3_from(six)
            d = ue4m3_half(d4[s])
            fast = d > 0 and six <= 448.0 and all(math.isfinite(v) for v in xb)
            if fast:
                vs = [c * d for c, _ in _FP4_BY_VALUE]
                codes = [_fp4_nearest(v, vs, _FP4_IDS) for v in xb]
            else:
                codes = [_fp4_scan(v, d) for v in xb]
            for j in range(8):
                qs[8 * s + j] = codes[j] | (codes[8 + j] << 4)
        out += d4 + qs
    return bytes(out)


def decode_nvfp4(raw):
    vals = array.array("f")
    for o in range(0, len(raw), 36):
        for s in range(4):
            d = ue4m3_half(raw[o + s])
            q = raw[o + 4 + 8 * s:o + 12 + 8 * s]
            vals.extend([FP4_CODES[b & 15] * d for b in q] + [FP4_CODES[b >> 4] * d for b in q])
    return vals


def decode(raw, ttype):
    if ttype == Q8_0:
        return decode_q8_0(raw)
    if ttype == NVFP4:
        return decode_nvfp4(raw)
    return f32_values(raw, ttype)


def encode(vals, ttype):
    return {F32: encode_f32, F16: encode_f16, BF16: encode_bf16, Q8_0: encode_q8_0, NVFP4: encode_nvfp4}[ttype](vals)


def nbytes(n_elems, ttype):
    if ttype == Q8_0:
        return n_elems // QK8_0 * 34
    if ttype == NVFP4:
        return n_elems // QK_NVFP4 * 36
    return n_elems * {F32: 4, F16: 2, BF16: 2}[ttype]


# ---------------------------------------------------------------- writer

def _str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _value(vtype, v):
    if vtype == T_STR:
        return _str(v)
    if vtype == T_ARR:
        etype, items = v
        head = struct.pack("<IQ", etype, len(items))
        if etype == T_STR:
            return head + b"".join(_str(s) for s in items)
        return head + struct.pack("<%d%s" % (len(items), _SCALAR[etype]), *items)
    return struct.pack("<" + _SCALAR[vtype], v)


class Writer:
    """Collects metadata and tensors, then writes the file in one pass."""

    def __init__(self):
        self.kv = []       # (key, vtype, value)
        self.tensors = []  # (name, dims (ggml order), ttype, bytes)

    def add(self, key, vtype, value):
        if any(k == key for k, _, _ in self.kv):
            raise ValueError("gguf: duplicate key " + key)
        self.kv.append((key, vtype, value))

    def add_tensor(self, name, dims, ttype, data):
        n = 1
        for d in dims:
            n *= d
        if len(data) != nbytes(n, ttype):
            raise ValueError("gguf: tensor %s: %d bytes for dims %s type %s" % (
                name, len(data), dims, TYPE_NAMES[ttype]))
        self.tensors.append((name, list(dims), ttype, data))

    def write(self, path):
        head = bytearray(GGUF_MAGIC + struct.pack("<IQQ", GGUF_VERSION, len(self.tensors), len(self.kv)))
        for k, t, v in self.kv:
            head += _str(k) + struct.pack("<I", t) + _value(t, v)
        off = 0
        for name, dims, ttype, data in self.tensors:
            head += _str(name) + struct.pack("<I", len(dims)) + struct.pack("<%dQ" % len(dims), *dims)
            head += struct.pack("<IQ", ttype, off)
            off += (len(data) + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT
        with open(path, "wb") as f:
            f.write(head)
            f.write(b"\0" * (-len(head) % ALIGNMENT))
            for _, _, _, data in self.tensors:
                f.write(data)
                f.write(b"\0" * (-len(data) % ALIGNMENT))


# ---------------------------------------------------------------- reader

class Reader:
    """Parses a whole GGUF file held in memory: .kv {key: value},
    .tensors {name: (dims, ttype, bytes)}. Raises ValueError on malformed input."""

    def __init__(self, path):
        with open(path, "rb") as f:
            self.buf = buf = f.read()
        self.o = 0
        if buf[:4] != GGUF_MAGIC:
            raise ValueError("gguf: bad magic")
        self.o = 4
        ver, nt, nkv = self._rd("<IQQ")
        if ver != GGUF_VERSION:
            raise ValueError("gguf: unsupported version %d" % ver)
        self.kv, self.kv_types, self.tensors = {}, {}, {}
        for _ in range(nkv):
            k = self._s()
            (t,) = self._rd("<I")
            self.kv[k] = self._v(t)
            self.kv_types[k] = t
        infos = []
        for _ in range(nt):
            name = self._s()
            (nd,) = self._rd("<I")
            dims = list(self._rd("<%dQ" % nd))
            t, off = self._rd("<IQ")
            infos.append((name, dims, t, off))
        base = (self.o + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT
        for name, dims, t, off in infos:
            n = 1
            for d in dims:
                n *= d
            size = nbytes(n, t)
            if base + off + size > len(buf):
                raise ValueError("gguf: tensor %s past end of file" % name)
            self.tensors[name] = (dims, t, buf[base + off:base + off + size])

    def _rd(self, fmt):
        v = struct.unpack_from(fmt, self.buf, self.o)
        self.o += struct.calcsize(fmt)
        return v

    def _s(self):
        (n,) = self._rd("<Q")
        s = self.buf[self.o:self.o + n].decode("utf-8")
        self.o += n
        return s

    def _v(self, t):
        if t == T_STR:
            return self._s()
        if t == T_ARR:
            et, n = self._rd("<IQ")
            if et == T_STR:
                return [self._s() for _ in range(n)]
            return list(self._rd("<%d%s" % (n, _SCALAR[et])))
        return self._rd("<" + _SCALAR[t])[0]

    def floats(self, name):
        dims, t, raw = self.tensors[name]
        return decode(raw, t)
