/* errors.c — what the status codes mean (heed_strerror), and the one
 * formatting helper behind every reason the planner and the loader give. */
#include "hrt.h"

#include <stdarg.h>
#include <stdio.h>

const char *heed_strerror(int code)
{
    switch (code) {
    case HEED_OK: return "success";
    case HEED_ENULL: return "a required pointer is NULL";
    case HEED_EBATCH: return "batch is negative";
    case HEED_ENOMEM: return "out of memory";
    case HEED_EPROBLEM: return "the problem descriptor is invalid";
    case HEED_EPARAMS: return "the score needs run-time weights that are missing, or run-time tensors are missing or of another dtype or shape";
    case HEED_EFLAGS: return "unknown or contradictory plan flags";
    case HEED_ENOWISDOM: return "no wisdom for this problem on this machine";
    case HEED_ESOMISSING: return "the shared object named by wisdom is missing or unreadable";
    case HEED_ESOUNSAFE: return "the shared object or its directory is not owned by this user or is writable by others";
    case HEED_ESOHASH: return "the shared object's SHA-256 does not match its wisdom record";
    case HEED_ESOLOAD: return "the shared object could not be loaded as a heed kernel table";
    case HEED_ESOPROBLEM: return "the shared object computes a different problem";
    case HEED_EWISDOM: return "not a wisdom file";
    case HEED_EIO: return "a file could not be read, written or locked";
    case HEED_ETUNE: return "tuning failed";
    case HEED_ESTATE: return "internal state error";
    case HEED_EOVERLAP: return "the output overlaps an input (q, k, v or a weight)";
    case HEED_EOVERFLOW: return "an argument's size in bytes overflows size_t or the address space";
    case HEED_ESOABI: return "the shared object's kernel table has another layout (built by another heed version)";
    case HEED_EEXPR: return "mask_mod or score_mod is not a valid expression (or reads an undeclared tensor)";
    default: return "unknown heed status code";
    }
}

void hrt_say(char *buf, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, n, fmt, ap);
    va_end(ap);
}
