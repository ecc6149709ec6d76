> -- header.h — every generated NAME.h (gen/emit.lua): its guard, includes and
> -- status codes around the family's declarations, the section HEADER
> -- (templates/kernel.h for the token forms, nd.h for the N-d forms).
$(provenance)
#ifndef $(GUARD)
#define $(GUARD)

#include <stddef.h>
> if IN16 or OUT16 or MC then
#include <stdint.h>
> end

#ifdef __cplusplus
extern "C" {
#endif

$(fragment("status.h"))

$(section(HEADER))

#ifdef __cplusplus
}
#endif
#endif
