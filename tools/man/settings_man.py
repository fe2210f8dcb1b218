#!/usr/bin/env python3
"""settings_man.py CONFIG_MD VERSION > ncclmpi.7: the ncclmpi(7) man page, made from doc/config.md
(itself `ncclmpi_info -m`, from src/util/config.def, and checked against it by unit_config_doc),
so the settings have one source."""
import re
import sys


def roff(text):
    """Markdown cell text to roff: `code` to bold, escapes for backslash, leading dots and dashes."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    text = re.sub(r"`([^`]*)`", r"\\fB\1\\fR", text)
    return text.replace("\\|", "|")


def cells(line):
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def main():
    md = open(sys.argv[1], encoding="utf-8").read().splitlines()
    version = sys.argv[2] if len(sys.argv) > 2 else ""
    out = [
        '.TH NCCLMPI 7 "" "ncclmpi %s" "ncclmpi"' % version,
        ".SH NAME",
        "ncclmpi \\- settings of libncclmpi, the MPI interposition layer that routes device buffers to NCCL",
        ".SH DESCRIPTION",
    ]
    para, section = [], "intro"
    for line in md[1:]:
        if line.startswith("## "):
            if para:
                out += [".PP", roff(" ".join(para))]
                para = []
            out.append(".SH " + roff(line[3:].upper()))
            section = line[3:]
        elif line.startswith("|"):
            c = cells(line)
            if not c or c[0] in ("Variable",) or set(c[0]) <= set("-"):
                continue
            if para:
                out += [".PP", roff(" ".join(para))]
                para = []
            out.append(".TP")
            if len(c) == 5:  # Variable | Type | Default | Accepted | Meaning
                out.append("%s (%s, default %s)" % (roff(c[0]), roff(c[1]), roff(c[2])))
                out.append(roff(c[4]) + " Accepted: " + roff(c[3]) + ".")
            else:  # Variable | Read by | Default | Meaning
                out.append("%s (read by %s, default %s)" % (roff(c[0]), roff(c[1]), roff(c[2])))
                out.append(roff(c[3]))
        elif line.strip():
            para.append(line.strip())
        elif para:
            out += [".PP", roff(" ".join(para))]
            para = []
    if para:
        out += [".PP", roff(" ".join(para))]
    out += [".SH SEE ALSO", "ncclmpi_info(1), ncclmpi_exec(1), mpirun(1)"]
    sys.stdout.write("\n".join(l if not l.startswith((".", "'")) or l[:3] in (".TH", ".SH", ".TP", ".PP") else "\\&" + l
                               for l in out) + "\n")


main()
