#ifndef HEED_KERNEL_STATUS
#define HEED_KERNEL_STATUS
/* Return codes of heed kernels (the same values as heed.h's HEED_*). */
#define HEED_KERNEL_OK 0
#define HEED_KERNEL_ENULL (-1)   /* a required pointer is NULL */
#define HEED_KERNEL_EBATCH (-2)  /* batch < 0 */
#define HEED_KERNEL_ENOMEM (-3)  /* scratch memory could not be allocated */
#define HEED_KERNEL_EPARAMS (-5) /* p, or a weight it must carry, is NULL */
#endif
#ifndef HEED_KERNEL_EOVERLAP
#define HEED_KERNEL_EOVERLAP (-17) /* out shares bytes with an input, or with a weight it reads */
#endif
