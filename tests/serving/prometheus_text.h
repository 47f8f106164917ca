// A strict reader of Prometheus' text exposition format (version 0.0.4), for the tests of GET /metrics: every line
// a HELP, a TYPE, a comment or a sample; names, label names and escapes as the format allows; each family's TYPE
// before its samples and its samples together; no series twice; counters never negative; a histogram's buckets
// ascending with non-decreasing counts, ending with le="+Inf" equal to its _count, with a _sum. Test code.
#pragma once

#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

struct PromSample {
    std::string name;
    std::map<std::string, std::string> labels;
    double value = 0;
};
struct PromFamily {
    std::string type = "untyped", help;
    std::vector<PromSample> samples;
};
using PromFamilies = std::map<std::string, PromFamily>;

namespace prom_detail {
inline bool name_start(char c, bool colon) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':'); }
inline bool name_char(char c, bool colon) { return name_start(c, colon) || (c >= '0' && c <= '9'); }
inline size_t read_name(const std::string& s, size_t i, bool colon) {  // end of the name starting at i (i: none)
    if (i >= s.size() || !name_start(s[i], colon)) return i;
    while (i < s.size() && name_char(s[i], colon)) i++;
    return i;
}
inline bool read_value(const std::string& t, double* v) {
    if (t == "+Inf" || t == "Inf") return *v = INFINITY, true;
    if (t == "-Inf") return *v = -INFINITY, true;
    if (t == "NaN") return *v = NAN, true;
    if (t.empty()) return false;
    char* end = nullptr;
    *v = strtod(t.c_str(), &end);
    return end == t.c_str() + t.size() && t.find_first_of("xXpP") == std::string::npos && t != "inf" && t != "nan";
}
// The family a sample belongs to: a histogram's _bucket, _sum and _count belong to the name without them.
inline std::string family_of(const std::string& sample, const PromFamilies& f) {
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
        const std::string s(suffix);
        if (sample.size() > s.size() && sample.compare(sample.size() - s.size(), s.size(), s) == 0) {
            const std::string base = sample.substr(0, sample.size() - s.size());
            auto it = f.find(base);
            if (it != f.end() && (it->second.type == "histogram" || it->second.type == "summary")) return base;
        }
    }
    return sample;
}
}  // namespace prom_detail

// false with *error naming the line and the problem
inline bool parse_prometheus_text(const std::string& text, PromFamilies* out, std::string* error) {
    using namespace prom_detail;
    PromFamilies& f = *out;
    f.clear();
    std::set<std::string> finished, typed, helped, series;
    std::string current;
    size_t line_no = 0, pos = 0;
    auto fail = [&](const std::string& why) { *error = "line " + std::to_string(line_no) + ": " + why; return false; };
    if (!text.empty() && text.back() != '\n') return *error = "the exposition does not end with a line feed", false;
    while (pos < text.size()) {
        const size_t nl = text.find('\n', pos);
        const std::string line = text.substr(pos, nl - pos);
        pos = nl + 1, line_no++;
        if (line.empty()) continue;
        if (line[0] == '#') {
            std::string kw = line.size() > 7 ? line.substr(2, 5) : "";
            if (line.compare(0, 7, "# HELP ") != 0 && line.compare(0, 7, "# TYPE ") != 0) continue;  // a comment
            const size_t e = read_name(line, 7, true);
            if (e == 7) return fail("no metric name after " + line.substr(0, 6));
            const std::string name = line.substr(7, e - 7);
            if (kw == "HELP ") {
                if (!helped.insert(name).second) return fail("a second HELP for " + name);
                f[name].help = e < line.size() ? line.substr(e + 1) : "";
            } else {
                if (!typed.insert(name).second) return fail("a second TYPE for " + name);
                if (f.count(name) && !f[name].samples.empty()) return fail("TYPE of " + name + " after its samples");
                const std::string type = e + 1 < line.size() ? line.substr(e + 1) : "";
                if (type != "counter" && type != "gauge" && type != "histogram" && type != "summary" && type != "untyped")
                    return fail("unknown type '" + type + "'");
                f[name].type = type;
            }
            continue;
        }
        PromSample s;
        size_t i = read_name(line, 0, true);
        if (i == 0) return fail("a sample without a metric name: " + line);
        s.name = line.substr(0, i);
        if (i < line.size() && line[i] == '{') {
            i++;
            while (i < line.size() && line[i] != '}') {
                const size_t e = read_name(line, i, false);
                if (e == i) return fail("a bad label name in " + line);
                const std::string key = line.substr(i, e - i);
                if (e + 1 >= line.size() || line[e] != '=' || line[e + 1] != '"') return fail("no =\" after " + key);
                std::string value;
                size_t j = e + 2;
                for (; j < line.size() && line[j] != '"'; j++) {
                    if (line[j] != '\\') { value += line[j]; continue; }
                    if (++j >= line.size()) return fail("an escape at the end of " + line);
                    if (line[j] == '\\') value += '\\';
                    else if (line[j] == '"') value += '"';
                    else if (line[j] == 'n') value += '\n';
                    else return fail(std::string("an unknown escape \\") + line[j]);
                }
                if (j >= line.size()) return fail("an unterminated label value in " + line);
                if (!s.labels.emplace(key, value).second) return fail("label " + key + " twice");
                i = j + 1;
                if (i < line.size() && line[i] == ',') i++;
            }
            if (i >= line.size()) return fail("no } in " + line);
            i++;
        }
        if (i >= line.size() || line[i] != ' ') return fail("no space before the value: " + line);
        const size_t vend = line.find(' ', i + 1);
        if (!read_value(line.substr(i + 1, vend == std::string::npos ? std::string::npos : vend - i - 1), &s.value))
            return fail("a bad value in " + line);
        if (vend != std::string::npos) {  // a timestamp: an integer
            const std::string ts = line.substr(vend + 1);
            if (ts.empty() || ts.find_first_not_of("-0123456789") != std::string::npos) return fail("a bad timestamp");
        }
        const std::string family = family_of(s.name, f);
        if (family != current) {
            if (finished.count(family)) return fail("the samples of " + family + " are not together");
            if (!current.empty()) finished.insert(current);
            current = family;
        }
        std::string key = s.name;
        for (const auto& [k, v] : s.labels) key += "\x1f" + k + "=" + v;
        if (!series.insert(key).second) return fail("the series " + s.name + " twice");
        f[family].samples.push_back(s);
    }
    for (const auto& [name, fam] : f) {
        if (fam.samples.empty()) continue;
        if (fam.type == "counter")
            for (const PromSample& s : fam.samples)
                if (!(s.value >= 0)) return *error = "counter " + s.name + " is negative or NaN", false;
        if (fam.type != "histogram") continue;
        // group by the labels other than le
        std::map<std::string, std::vector<const PromSample*>> groups;
        std::map<std::string, int> sums, counts;
        std::map<std::string, double> count_value;
        for (const PromSample& s : fam.samples) {
            auto labels = s.labels;
            labels.erase("le");
            std::string g;
            for (const auto& [k, v] : labels) g += k + "=" + v + ";";
            if (s.name == name + "_bucket") {
                if (!s.labels.count("le")) return *error = s.name + " without le", false;
                groups[g].push_back(&s);
            } else if (s.name == name + "_sum") {
                sums[g]++;
            } else if (s.name == name + "_count") {
                counts[g]++, count_value[g] = s.value;
            } else {
                return *error = "histogram " + name + " has a sample " + s.name, false;
            }
        }
        for (const auto& [g, buckets] : groups) {
            double le_prev = -INFINITY, count_prev = 0;
            for (const PromSample* b : buckets) {
                double le;
                if (!read_value(b->labels.at("le"), &le)) return *error = name + ": le is not a number", false;
                if (!(le > le_prev)) return *error = name + ": buckets not in ascending le", false;
                if (b->value < count_prev) return *error = name + ": bucket counts decrease", false;
                le_prev = le, count_prev = b->value;
            }
            if (!std::isinf(le_prev)) return *error = name + ": no le=\"+Inf\" bucket", false;
            if (sums[g] != 1 || counts[g] != 1) return *error = name + ": not one _sum and one _count", false;
            if (count_value[g] != count_prev) return *error = name + ": the +Inf bucket is not _count", false;
        }
    }
    return true;
}

// The value of the sample `name` whose labels include `labels`; NAN if there is none.
inline double prom_value(const PromFamilies& f, const std::string& name,
                         const std::map<std::string, std::string>& labels = {}) {
    for (const auto& [family, fam] : f)
        for (const PromSample& s : fam.samples) {
            if (s.name != name) continue;
            bool all = true;
            for (const auto& [k, v] : labels) all &= s.labels.count(k) && s.labels.at(k) == v;
            if (all) return s.value;
        }
    return NAN;
}
