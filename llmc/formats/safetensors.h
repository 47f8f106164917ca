// Safetensors, Hugging Face's tensor file:
//   uint64 little-endian N, then N bytes of JSON (may end in spaces), then the data section:
//   {"__metadata__": {"format": "pt", ...},                      optional, string -> string
//    "<name>": {"dtype": "F32", "shape": [rows, cols], "data_offsets": [begin, end]}, ...}
//   offsets count bytes from the start of the data section.
// The reader checks the header length against the file and a 100 MB limit (the reference implementation's),
// the JSON strictly (no duplicate names or fields, only these fields), every dtype, that each tensor's bytes are
// its dtype size x its shape's product, and that the tensors tile the data section exactly: in range, contiguous,
// non-overlapping, nothing left over. Every error is a one-line FileError naming the file and, where there is
// one, the tensor. It reads headers only; callers read the bytes they need (SafetensorsFile::data_offset).
// The writer streams: it writes the header for a list of entries, then takes their bytes in order.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "llmc/core/utils.h"
#include "llmc/formats/json_reader.h"

constexpr uint64_t kSafetensorsMaxHeaderBytes = 100000000;

// Bytes per element of a safetensors dtype name; 0 for a name the format does not have.
inline int safetensors_dtype_bytes(const std::string& dtype) {
    static const std::pair<const char*, int> kDtypes[] = {
        {"BOOL", 1}, {"U8", 1}, {"I8", 1}, {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
        {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4}, {"F64", 8}, {"I64", 8}, {"U64", 8}};
    for (const auto& d : kDtypes) if (dtype == d.first) return d.second;
    return 0;
}

inline std::string shape_string(const std::vector<uint64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); i++) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

struct SafetensorsTensor {
    std::string name, dtype;
    std::vector<uint64_t> shape;  // empty for a scalar
    uint64_t numel = 1;
    uint64_t begin = 0, end = 0;  // data_offsets: bytes within the data section
};

struct SafetensorsFile {
    std::string path;
    uint64_t data_start = 0;  // 8 + N: where the data section begins in the file
    std::vector<SafetensorsTensor> tensors;  // in header order
    std::vector<std::pair<std::string, std::string>> metadata;
    std::map<std::string, size_t> index;  // name -> position in tensors

    const SafetensorsTensor* find(const std::string& name) const {
        auto it = index.find(name);
        return it == index.end() ? nullptr : &tensors[it->second];
    }
    uint64_t data_offset(const SafetensorsTensor& t) const { return data_start + t.begin; }
};

namespace safetensors_detail {

// One tensor's entry: {"dtype": ..., "shape": [...], "data_offsets": [b, e]}, each field exactly once.
inline SafetensorsTensor parse_entry(const std::string& path, JsonCursor& j, const std::string& name,
                                     uint64_t data_bytes) {
    SafetensorsTensor t;
    t.name = name;
    bool has_dtype = false, has_shape = false, has_offsets = false;
    auto once = [&](bool* seen, const std::string& field) {
        if (*seen) file_error(path, "tensor '%s': field \"%s\" appears twice", name.c_str(), field.c_str());
        *seen = true;
    };
    j.for_each_member([&](const std::string& field) {
        if (field == "dtype") {
            once(&has_dtype, field);
            t.dtype = j.parse_string();
            if (safetensors_dtype_bytes(t.dtype) == 0) file_error(path, "tensor '%s': unknown dtype '%s'", name.c_str(), t.dtype.c_str());
        } else if (field == "shape") {
            once(&has_shape, field);
            j.expect('[');
            if (!j.accept(']')) {
                do {
                    const int64_t d = j.parse_int();
                    if (d < 0) file_error(path, "tensor '%s': negative dimension %lld in its shape", name.c_str(), (long long)d);
                    t.shape.push_back((uint64_t)d);
                } while (j.accept(','));
                j.expect(']');
            }
        } else if (field == "data_offsets") {
            once(&has_offsets, field);
            j.expect('[');
            const int64_t b = j.parse_int();
            j.expect(',');
            const int64_t e = j.parse_int();
            j.expect(']');
            if (b < 0 || e < b) file_error(path, "tensor '%s': data_offsets [%lld, %lld] are not a range", name.c_str(), (long long)b, (long long)e);
            t.begin = (uint64_t)b;
            t.end = (uint64_t)e;
        } else {
            file_error(path, "tensor '%s': unknown field \"%s\" (a tensor has dtype, shape, data_offsets)", name.c_str(), field.c_str());
        }
    });
    if (!has_dtype || !has_shape || !has_offsets) {
        file_error(path, "tensor '%s': missing \"%s\"", name.c_str(), !has_dtype ? "dtype" : !has_shape ? "shape" : "data_offsets");
    }
    const uint64_t elem = (uint64_t)safetensors_dtype_bytes(t.dtype);
    for (uint64_t d : t.shape) {
        if (d != 0 && t.numel > UINT64_MAX / elem / d) file_error(path, "tensor '%s': shape %s is too large", name.c_str(), shape_string(t.shape).c_str());
        t.numel *= d;
    }
    if (t.end > data_bytes) {
        file_error(path, "tensor '%s': data_offsets [%llu, %llu] run past the end of the data section (%llu bytes)",
                   name.c_str(), (unsigned long long)t.begin, (unsigned long long)t.end, (unsigned long long)data_bytes);
    }
    if (t.end - t.begin != t.numel * elem) {
        file_error(path, "tensor '%s': data_offsets [%llu, %llu] hold %llu bytes, but dtype %s and shape %s need %llu",
                   name.c_str(), (unsigned long long)t.begin, (unsigned long long)t.end,
                   (unsigned long long)(t.end - t.begin), t.dtype.c_str(), shape_string(t.shape).c_str(),
                   (unsigned long long)(t.numel * elem));
    }
    return t;
}

// The tensors must tile the data section: sorted by offset, each starts where the one before ends.
inline void check_tiling(const std::string& path, const std::vector<SafetensorsTensor>& tensors, uint64_t data_bytes) {
    std::vector<size_t> order(tensors.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {  // ties in header order, so errors are stable
        return std::make_tuple(tensors[a].begin, tensors[a].end, a) < std::make_tuple(tensors[b].begin, tensors[b].end, b);
    });
    uint64_t at = 0;
    const SafetensorsTensor* prev = nullptr;
    for (size_t i : order) {
        const SafetensorsTensor& t = tensors[i];
        if (t.begin < at) {
            file_error(path, "tensor '%s': data_offsets [%llu, %llu] overlap tensor '%s' [%llu, %llu]", t.name.c_str(),
                       (unsigned long long)t.begin, (unsigned long long)t.end, prev->name.c_str(),
                       (unsigned long long)prev->begin, (unsigned long long)prev->end);
        }
        if (t.begin > at) {
            file_error(path, "tensor '%s': data_offsets [%llu, %llu] leave a gap after byte %llu (tensors must be contiguous)",
                       t.name.c_str(), (unsigned long long)t.begin, (unsigned long long)t.end, (unsigned long long)at);
        }
        at = t.end;
        prev = &t;
    }
    if (at != data_bytes) {
        file_error(path, "the tensors end at byte %llu of the data section, which is %llu bytes (trailing bytes)",
                   (unsigned long long)at, (unsigned long long)data_bytes);
    }
}

}  // namespace safetensors_detail

inline SafetensorsFile read_safetensors_header(const std::string& path) {
    using namespace safetensors_detail;
    InputFile in(path);
    SafetensorsFile f;
    f.path = path;
    const uint64_t file_bytes = (uint64_t)in.size();
    if (file_bytes < 8) file_error(path, "file is %llu bytes, shorter than the 8-byte safetensors header length", (unsigned long long)file_bytes);
    unsigned char len_bytes[8];
    in.read(len_bytes, 8, "the header length");
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | len_bytes[i];  // little-endian whatever the host
    if (n > kSafetensorsMaxHeaderBytes) {
        file_error(path, "header length %llu is over the %llu-byte limit (not a safetensors file?)", (unsigned long long)n,
                   (unsigned long long)kSafetensorsMaxHeaderBytes);
    }
    if (n > file_bytes - 8) {
        file_error(path, "header length %llu runs past the end of the file (%llu bytes)", (unsigned long long)n,
                   (unsigned long long)file_bytes);
    }
    std::string text(n, '\0');
    if (n) in.read(&text[0], n, "the header");
    f.data_start = 8 + n;
    const uint64_t data_bytes = file_bytes - f.data_start;
    std::string name;  // the entry being parsed, for JSON errors inside it
    try {
        JsonCursor j(text);
        bool has_metadata = false;
        j.for_each_member([&](const std::string& key) {
            if (key == "__metadata__") {
                if (has_metadata) file_error(path, "\"__metadata__\" appears twice");
                has_metadata = true;
                j.for_each_member([&](std::string& k) {
                    if (j.peek() != '"') file_error(path, "__metadata__ \"%s\": values must be strings", k.c_str());
                    f.metadata.emplace_back(std::move(k), j.parse_string());
                });
                return;
            }
            name = key;
            if (key.empty()) file_error(path, "a tensor with an empty name");
            if (f.index.count(key)) file_error(path, "tensor '%s' appears twice in the header", key.c_str());
            f.index[key] = f.tensors.size();
            f.tensors.push_back(parse_entry(path, j, key, data_bytes));
            name.clear();
        });
        j.expect_end();
    } catch (const JsonError& e) {
        if (name.empty()) file_error(path, "safetensors header: %s", e.what());
        file_error(path, "tensor '%s': safetensors header: %s", name.c_str(), e.what());
    }
    check_tiling(path, f.tensors, data_bytes);
    return f;
}

// What the writer lays out: a tensor's name, dtype and shape (its bytes follow in this order).
struct SafetensorsEntry {
    std::string name, dtype;
    std::vector<uint64_t> shape;
};

// Writes the header for `entries` at construction (data aligned to 8 bytes, as the reference writer does), then
// write() takes the tensors' bytes in entry order, in pieces of any size; commit() checks the count and renames
// the file into place (llmc/core/utils.h AtomicOutputFile: nothing half-written is ever visible).
class SafetensorsWriter {
public:
    SafetensorsWriter(const std::string& path, const std::vector<SafetensorsEntry>& entries,
                      const std::vector<std::pair<std::string, std::string>>& metadata)
        : path_(path), out_(path) {
        std::string h = "{";
        if (!metadata.empty()) {
            h += "\"__metadata__\":{";
            for (size_t i = 0; i < metadata.size(); i++) {
                h += (i ? "," : "") + json_quote(metadata[i].first) + ":" + json_quote(metadata[i].second);
            }
            h += "}";
        }
        std::map<std::string, int> seen;
        for (const SafetensorsEntry& e : entries) {
            const int elem = safetensors_dtype_bytes(e.dtype);
            if (elem == 0) file_error(path, "cannot write tensor '%s': unknown dtype '%s'", e.name.c_str(), e.dtype.c_str());
            if (e.name.empty() || e.name == "__metadata__" || seen[e.name]++) {
                file_error(path, "cannot write tensor '%s': empty, reserved or repeated name", e.name.c_str());
            }
            uint64_t bytes = (uint64_t)elem;
            for (uint64_t d : e.shape) bytes *= d;
            h += std::string(h.size() > 1 ? "," : "") + json_quote(e.name) + ":{\"dtype\":\"" + e.dtype +
                 "\",\"shape\":[";
            for (size_t i = 0; i < e.shape.size(); i++) h += (i ? "," : "") + std::to_string(e.shape[i]);
            h += "],\"data_offsets\":[" + std::to_string(total_) + "," + std::to_string(total_ + bytes) + "]}";
            total_ += bytes;
        }
        h += "}";
        h.append((8 - h.size() % 8) % 8, ' ');  // 8 + N is a multiple of 8
        unsigned char len[8];
        for (int i = 0; i < 8; i++) len[i] = (unsigned char)((uint64_t)h.size() >> (8 * i));
        out_.write(len, 8);
        out_.write(h.data(), h.size());
    }

    void write(const void* src, size_t bytes) {
        if (written_ + bytes > total_) file_error(path_, "writer got more than the %llu data bytes its header declares", (unsigned long long)total_);
        out_.write(src, bytes);
        written_ += bytes;
    }
    void commit() {
        if (written_ != total_) {
            file_error(path_, "writer got %llu of the %llu data bytes its header declares", (unsigned long long)written_,
                       (unsigned long long)total_);
        }
        out_.commit();
    }

private:
    std::string path_;
    AtomicOutputFile out_;
    uint64_t total_ = 0, written_ = 0;
};
