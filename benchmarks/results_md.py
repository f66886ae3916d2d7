"""Write one generated section of model_cards/RESULTS.md between its markers, keeping the rest."""

from pathlib import Path


def marked(name, body):
    """`body` between the markers `<!-- {name}:begin -->` and `<!-- {name}:end -->`."""
    return f"<!-- {name}:begin -->\n{body.strip()}\n<!-- {name}:end -->"


def write_section(path, name, body, *, at_top=False, create=True):
    """Replace the text between `<!-- {name}:begin -->` and `<!-- {name}:end -->`; if absent, the section is
    appended (`at_top`: put after the file's first line, its title), or refused with `create=False`."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    section = marked(name, body)
    path = Path(path)
    old = path.read_text(encoding="utf-8") if path.is_file() else "# Results\n"
    if begin in old and end in old:
        new = old[: old.index(begin)] + section + old[old.index(end) + len(end):]
    elif not create:
        raise ValueError(f"{path} has no {begin} ... {end} markers to write the {name} section between")
    elif at_top:
        title, _, rest = old.partition("\n")
        new = title + "\n\n" + section + "\n\n" + rest.lstrip("\n")
    else:
        new = old.rstrip("\n") + "\n\n" + section + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(new, encoding="utf-8")
    return section
