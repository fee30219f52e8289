package handover

import (
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
)

// BuildID is the GNU build id of an ELF binary, in hex: what the client
// (the isolate binary) sends of itself. A service takes runs only from
// the isolate binary it was installed with: a different build might
// parse or report differently.
func BuildID(binary string) (string, error) {
	f, err := elf.Open(binary)
	if err != nil {
		return "", err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE {
			continue
		}
		notes, err := io.ReadAll(p.Open())
		if err != nil {
			return "", err
		}
		if id, ok := gnuBuildID(notes, f.ByteOrder); ok {
			return id, nil
		}
	}
	return "", errors.New(binary + " has no GNU build id")
}

// ntGNUBuildID is the note type of a GNU build id (elf.h).
const ntGNUBuildID = 3

// gnuBuildID finds the NT_GNU_BUILD_ID note among notes.
func gnuBuildID(notes []byte, order binary.ByteOrder) (string, bool) {
	align := func(n uint32) int { return int((n + 3) &^ 3) }
	for len(notes) >= 12 {
		namesz, descsz, typ := order.Uint32(notes), order.Uint32(notes[4:]), order.Uint32(notes[8:])
		name := notes[12:]
		if len(name) < align(namesz) {
			break
		}
		desc := name[align(namesz):]
		if len(desc) < int(descsz) {
			break
		}
		if typ == ntGNUBuildID && namesz == 4 && string(name[:4]) == "GNU\x00" {
			return hex.EncodeToString(desc[:descsz]), true
		}
		if len(desc) < align(descsz) {
			break
		}
		notes = desc[align(descsz):]
	}
	return "", false
}
