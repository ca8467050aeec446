#ifndef DF_VERSION_H
#define DF_VERSION_H

#define DF_VERSION "0.1.0"

#ifdef DF_HAVE_CUDA
#define DF_BACKENDS "cpu cuda"
#else
#define DF_BACKENDS "cpu"
#endif

#endif
