# numerics_table.awk — a kernel table (table.c of tests/matrix.lua) cut down
# to the kernels whose names match RE (awk -v RE=...): their includes, call
# adapters and entries, and the count. For make test-numerics.
/^#include "/ {
    name = $2; gsub(/"|\.h/, "", name)
    if (name == "kernel_table" || name == "dtype" || name ~ RE) print
    next
}
/^static int call_/ {
    name = $3; sub(/^call_/, "", name); sub(/\(.*/, "", name)
    keep = name ~ RE; adapter = 1
}
/^    \{ "/ {
    name = $2; gsub(/[",]/, "", name)
    if (name ~ RE) { print; n++ }
    next
}
/^\};$/ { print; next }
/^const int heed_kernel_count/ { print "const int heed_kernel_count = " n ";"; next }
keep || (!adapter && !/^$/) { print }
/^\}$/ { if (keep) print ""; keep = 0; adapter = 0 }
