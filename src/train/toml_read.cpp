// toml_read.cpp — fsdp_toml_visit (toml_read.h): toml++ parses, this file walks the top-level table
// and hands each value to the C caller as text. No exception crosses into C: every one is caught here
// and turned into -1 with a message.
#include "train/toml_read.h"

#include <toml++/toml.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>
#include <sys/stat.h>

namespace {

constexpr long kMaxBytes = 1L << 20;

void set_err(char *err, size_t cap, const char *path, const toml::source_region &at, const char *what) {
    if (err && cap) std::snprintf(err, cap, "%s:%u:%u: %s", path, at.begin.line, at.begin.column, what);
}

// Reads the whole file (a regular file, at most kMaxBytes: a FIFO or a device is never read).
int read_file(const char *path, std::string *out, char *err, size_t cap) {
    struct stat st;
    FILE *f = std::fopen(path, "rb");
    if (!f) {
        if (err && cap) std::snprintf(err, cap, "cannot open %s: %s", path, std::strerror(errno));
        return -1;
    }
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > kMaxBytes) {
        if (err && cap)
            std::snprintf(err, cap, "%s is not a regular file of at most %ld bytes", path, kMaxBytes);
        std::fclose(f);
        return -1;
    }
    out->resize(static_cast<size_t>(st.st_size));
    size_t got = out->empty() ? 0 : std::fread(&(*out)[0], 1, out->size(), f);
    int bad = std::ferror(f);
    std::fclose(f);
    if (bad || got != out->size()) {
        if (err && cap) std::snprintf(err, cap, "cannot read %s", path);
        return -1;
    }
    return 0;
}

} // namespace

extern "C" int fsdp_toml_visit(const char *path, fsdp_toml_visit_fn fn, void *ctx, char *err,
                               size_t err_cap) {
    if (err && err_cap) err[0] = '\0';
    try {
        std::string text;
        if (read_file(path, &text, err, err_cap) != 0) return -1;
        toml::table tbl = toml::parse(text, std::string_view(path));
        for (auto &&kv : tbl) {
            const std::string key(kv.first.str());
            const toml::node &v = kv.second;
            const toml::source_region &at = v.source();
            const int line = static_cast<int>(at.begin.line);
            char buf[64];
            int rc = 0;
            if (auto s = v.as_string()) {
                if (s->get().find('\0') != std::string::npos) { /* C would see it cut at the NUL */
                    std::string msg = "\"" + key + "\": a string holding NUL (\\u0000) is no setting";
                    set_err(err, err_cap, path, at, msg.c_str());
                    return -1;
                }
                rc = fn(ctx, key.c_str(), s->get().c_str(), FSDP_TOML_STRING, line);
            } else if (auto i = v.as_integer()) {
                std::snprintf(buf, sizeof buf, "%" PRId64, static_cast<int64_t>(i->get()));
                rc = fn(ctx, key.c_str(), buf, FSDP_TOML_INTEGER, line);
            } else if (auto d = v.as_floating_point()) {
                std::snprintf(buf, sizeof buf, "%.17g", d->get());
                rc = fn(ctx, key.c_str(), buf, FSDP_TOML_FLOAT, line);
            } else if (auto b = v.as_boolean()) {
                rc = fn(ctx, key.c_str(), b->get() ? "1" : "0", FSDP_TOML_BOOL, line);
            } else if (auto a = v.as_array()) {
                for (auto &&e : *a) {
                    auto es = e.as_string();
                    if (!es || es->get().find('\0') != std::string::npos) {
                        std::string msg = "\"" + key + "\": " +
                                          (es ? "a string holding NUL (\\u0000) is no setting"
                                              : "only arrays of strings are settings");
                        set_err(err, err_cap, path, e.source(), msg.c_str());
                        return -1;
                    }
                    rc = fn(ctx, key.c_str(), es->get().c_str(), FSDP_TOML_ARRAY_ITEM,
                            static_cast<int>(e.source().begin.line));
                    if (rc) break;
                }
            } else {
                std::string msg = "\"" + key + "\" is a " + (v.is_table() ? "table" : "date or time") +
                                  ": settings are top-level keys named like the flags (seq-len = 128)";
                set_err(err, err_cap, path, at, msg.c_str());
                return -1;
            }
            if (rc) return rc;
        }
        return 0;
    } catch (const toml::parse_error &e) {
        set_err(err, err_cap, path, e.source(), std::string(e.description()).c_str());
    } catch (const std::exception &e) {
        if (err && err_cap) std::snprintf(err, err_cap, "%s: %s", path, e.what());
    } catch (...) {
        if (err && err_cap) std::snprintf(err, err_cap, "%s: cannot be parsed", path);
    }
    return -1;
}
