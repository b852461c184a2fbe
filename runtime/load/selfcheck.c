/*
 * selfcheck.c: the mark every shim carries, and the check that the file about to be loaded
 * as the real driver is not a shim. The mark is an ELF note (name "shimgen") in the shim's
 * PT_NOTE segment. Loading a shim as the driver would fill every slot with a shim's own
 * trampolines, so every call would jump in a circle; a copy of the shim (another inode,
 * another build-id) would also run its own constructor. The file is read, never loaded:
 * its ELF header, program headers and notes, with pread, before dlopen sees it.
 */

#define _GNU_SOURCE
#include <elf.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "load.h"

#define NOTE_NAME "shimgen"
#define NOTE_TYPE 0x5348494du /* "SHIM" */

/* The assembler gives a section named .note.* the type SHT_NOTE, and the linker puts it in
 * the PT_NOTE segment: the mark can be found from the program headers alone. */
static const struct {
    uint32_t namesz, descsz, type;
    char name[8];
    uint32_t version;
} shim_note __attribute__((used, section(".note.shimgen"), aligned(4))) = {
    sizeof NOTE_NAME, 4, NOTE_TYPE, NOTE_NAME, 1};

/* 1 when the notes in buf[0..len) hold the mark. */
static int notes_have_mark(const unsigned char *buf, size_t len)
{
    size_t at = 0;
    while (at + sizeof(Elf64_Nhdr) <= len) {
        Elf64_Nhdr n;
        memcpy(&n, buf + at, sizeof n);
        size_t name = at + sizeof n;
        size_t desc = name + (((size_t)n.n_namesz + 3u) & ~(size_t)3u);
        size_t next = desc + (((size_t)n.n_descsz + 3u) & ~(size_t)3u);
        if (n.n_namesz > len || n.n_descsz > len || next > len || next <= at)
            return 0;
        if (n.n_type == NOTE_TYPE && n.n_namesz == sizeof NOTE_NAME &&
            memcmp(buf + name, NOTE_NAME, sizeof NOTE_NAME) == 0)
            return 1;
        at = next;
    }
    return 0;
}

/* 1 when `path` is a regular ELF file that carries the mark: this shim, a copy of it, a link
 * to it, or any other shimgen shim. 0 when it does not, or cannot be read (then dlopen will
 * say why). Opened non-blocking, so a FIFO cannot stall the load. */
int shimgen_file_is_shim(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return 0;
    int found = 0;
    struct stat st;
    Elf64_Ehdr eh;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
        pread(fd, &eh, sizeof eh, 0) != (ssize_t)sizeof eh ||
        memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
        eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum > 256)
        goto out;
    for (unsigned i = 0; i < eh.e_phnum && !found; i++) {
        Elf64_Phdr ph;
        if (pread(fd, &ph, sizeof ph, (off_t)(eh.e_phoff + i * sizeof ph)) != (ssize_t)sizeof ph)
            break;
        if (ph.p_type != PT_NOTE || ph.p_filesz == 0 || ph.p_filesz > 4096)
            continue;
        unsigned char buf[4096];
        if (pread(fd, buf, ph.p_filesz, (off_t)ph.p_offset) == (ssize_t)ph.p_filesz)
            found = notes_have_mark(buf, ph.p_filesz);
    }
out:
    close(fd);
    return found;
}
