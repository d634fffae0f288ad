/* vram — which symbols libvram.so exports.
 *
 * The library is compiled with -fvisibility=hidden: a function is exported only when a public header
 * (include/vram/) declares it between VR_API_BEGIN and VR_API_END, or marks it VR_API. Functions that
 * the library's own files share through src/ headers stay hidden, so libvram.so exports exactly the
 * public vr_ API (tests/api/exports.sh checks it). Programs including the headers are unaffected: the
 * pragma only gives the declarations default visibility, which is what they have anyway.
 *
 * nvcc sees these headers too (the CUDA kernels include a few); it defines none of the functions they
 * declare, so the pragmas are left out there rather than relying on nvcc to pass them through. */
#ifndef VRAM_EXPORT_H
#define VRAM_EXPORT_H

#if (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
/* One declaration exported from libvram.so. */
#define VR_API __attribute__((visibility("default")))
/* Every declaration between VR_API_BEGIN and VR_API_END is exported (a public header's body). */
#define VR_API_BEGIN _Pragma("GCC visibility push(default)")
#define VR_API_END _Pragma("GCC visibility pop")
#else
#define VR_API
#define VR_API_BEGIN
#define VR_API_END
#endif

#endif
