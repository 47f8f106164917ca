// The start-up tables the programs print (the trainer's, generation's plan): rows of "| name | value |" between rules,
// and byte counts people read.
#pragma once

#include <cstdio>
#include <string>

// "12.34 GiB", "56.7 MiB", "890 B".
inline std::string format_bytes(double bytes) {
    char buf[32];
    if (bytes >= 1024.0 * 1024 * 1024) snprintf(buf, sizeof(buf), "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
    else if (bytes >= 1024.0 * 1024) snprintf(buf, sizeof(buf), "%.1f MiB", bytes / (1024.0 * 1024));
    else if (bytes >= 1024.0) snprintf(buf, sizeof(buf), "%.1f KiB", bytes / 1024.0);
    else snprintf(buf, sizeof(buf), "%.0f B", bytes);
    return buf;
}

// One row of the start-up table: "| name                 | value                              |".
inline std::string format_table_row(const std::string& name, const std::string& value) {
    char buf[256];
    snprintf(buf, sizeof(buf), "| %-24s | %-44s |", name.c_str(), value.c_str());
    return buf;
}
inline std::string format_table_rule() { return "+" + std::string(26, '-') + "+" + std::string(46, '-') + "+"; }
