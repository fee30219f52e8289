//go:build ignore

/*
 * main of isolate-init (scripts/build-init.sh links it with the init C
 * files of package boxinit; Go never compiles it). A real start never
 * gets here: with isolate's hidden init argument, init_main.c's
 * constructor runs the box's init and exits first.
 */
#include <stdio.h>

int main(void) {
	fputs("isolate-init is started only by isolate\n", stderr);
	return 2;
}
