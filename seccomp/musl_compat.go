package seccomp

// A static build links Debian's libseccomp.a, which is compiled against
// glibc with _FORTIFY_SOURCE, into a binary whose C library is musl (see
// the Makefile: glibc's start-up costs every run about half a
// millisecond). The archive's only glibc-only symbol is __fprintf_chk, in
// code we never call (seccomp_export_pfc); musl gets a plain version.

/*
#if !defined(__GLIBC__)
#include <stdarg.h>
#include <stdio.h>
int __fprintf_chk(FILE *f, int flag, const char *format, ...) {
	va_list ap;
	va_start(ap, format);
	int n = vfprintf(f, format, ap);
	va_end(ap);
	return n;
}
#endif
*/
import "C"
