package boxinit

// #include <stdlib.h>
// #include "init.h"
// char *isolate_render_plan(const char *buf, size_t n, size_t *outn);
import "C"

import "unsafe"

// renderPlan decodes a plan with init's own reader (init_io.c) and
// renders it as text, one record a line: protocol_test.go checks what Go
// encodes against what C decodes.
func renderPlan(buf []byte) string {
	var n C.size_t
	cbuf := C.CBytes(buf)
	defer C.free(cbuf)
	text := C.isolate_render_plan((*C.char)(cbuf), C.size_t(len(buf)), &n)
	defer C.free(unsafe.Pointer(text))
	return C.GoStringN(text, C.int(n))
}

// opNames are the names of every operation protocol.h lists, in order.
func opNames() []string {
	var names []string
	for op := C.enum_isolate_op(C.ISOLATE_OP_NONE + 1); op < C.ISOLATE_OP_COUNT; op++ {
		names = append(names, C.GoString(C.init_op_name(op)))
	}
	return names
}
