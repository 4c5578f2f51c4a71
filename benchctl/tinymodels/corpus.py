"""The fixed training text of the tiny models' tokenizer.

Reasons and facts: docs/testing.md#the-tiny-models-corpus.
"""

from __future__ import annotations

PROSE = """\
The quick brown fox jumps over the lazy dog. This is a small model that was made on this machine with
random weights, so the text it writes has no meaning at all. It is here to measure how fast a server can
read a prompt and write an answer, how much memory it uses, and what happens when the machine gets hot.
A benchmark should be honest about what it measures and what it does not. Every number in a report
names its source: the server, the client clock, or the operating system. When a value cannot be
measured, the report says null and gives the reason instead of a guess.
People choose a local language model by trading speed, memory and quality against each other. A larger
model writes better text but needs more memory and time; a smaller one is quick but makes more mistakes.
Quantization makes the weights smaller, which saves memory and often makes generation faster, at some
cost in quality. Speculative decoding uses a small draft model to propose tokens that the large model
then checks in one batch: when most of the proposals are accepted, the answer arrives sooner.
The first part of a request is prompt processing, where the server reads every token of the prompt and
fills its cache. The second part is generation, where it writes one token after another until it reaches
the limit or the end of the answer. Time to first token is the time between sending the request and
receiving the first piece of the answer. Throughput is the number of tokens per second.
We run each probe several times and report the median, the spread and the confidence interval. We let
the machine cool down between runs, because a hot processor slows down and the later runs would look
worse than the first ones. We record the temperature, the power source and the memory of every server.
Please read the documentation before you start, and write to us if something does not work as you
expected. Thank you for your help. There are many ways to make this better, and we would like to hear
about them. You can find more information in the project's README file, which also explains how to
install the runtimes, how to generate the tiny models, and how to run the tests on a new machine.
What is the best model for my computer? It depends on how much memory you have, how long your prompts
are, and whether you need the answer quickly or only need it to be right. Here is one way to find out:
write down the models you would consider, run a sweep over them, look at the Pareto front, and lock the
one you choose. Then start the server with the same settings that were measured.
one two three four five six seven eight nine ten hundred thousand million first second third last next
time year day week month hour minute people way thing man woman child world life hand part place case
point number group problem fact question work government company system program story home water room
money book eye job word business issue side kind head house service friend father mother power country
is are was were be been being have has had do does did will would can could should may might must shall
new good high old great big small large long little own other right early young important few public
bad same able back still here there where when why how all any both each more most some such only very
about after again against because before between during from into off over through under until upon
"""

CODE = '''\
"""Utilities for reading and writing configuration files."""

import os
import sys
import re
from collections import defaultdict, namedtuple
from typing import Any, Dict, List, Optional

__all__ = ["Config", "load", "dump", "ConfigError"]


class ConfigError(Exception):
    """Raised when a configuration file cannot be parsed."""

    def __init__(self, message, filename=None, lineno=None):
        super().__init__(message)
        self.filename = filename
        self.lineno = lineno

    def __str__(self):
        if self.filename is None:
            return self.args[0]
        return "%s:%d: %s" % (self.filename, self.lineno, self.args[0])


class Config(object):
    """A mapping of section names to dictionaries of options."""

    def __init__(self, defaults=None, strict=True):
        self._sections = {}
        self._defaults = dict(defaults or {})
        self.strict = strict

    def __repr__(self):
        return "<%s sections=%r>" % (self.__class__.__name__, list(self._sections))

    def __len__(self):
        return len(self._sections)

    def __iter__(self):
        return iter(self._sections)

    def __contains__(self, key):
        return key in self._sections

    def __getitem__(self, key):
        try:
            return self._sections[key]
        except KeyError:
            raise KeyError(key) from None

    def get(self, section, option, default=None):
        """Return the value of an option, or default if it is not set."""
        if section not in self._sections:
            return default
        value = self._sections[section].get(option)
        if value is None:
            value = self._defaults.get(option, default)
        return value

    def set(self, section, option, value):
        if not isinstance(option, str):
            raise TypeError("option names must be strings, not %s" % type(option).__name__)
        self._sections.setdefault(section, {})[option] = value

    def items(self, section):
        result = []
        for key, value in sorted(self._sections.get(section, {}).items()):
            result.append((key, value))
        return result

    @property
    def sections(self):
        return list(self._sections.keys())

    @classmethod
    def from_file(cls, path, encoding="utf-8"):
        self = cls()
        with open(path, "r", encoding=encoding) as f:
            self.read(f, filename=path)
        return self

    def read(self, lines, filename="<string>"):
        section = None
        for lineno, line in enumerate(lines, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith("[") and line.endswith("]"):
                section = line[1:-1].strip()
                self._sections.setdefault(section, {})
            elif "=" in line and section is not None:
                name, _, value = line.partition("=")
                self.set(section, name.strip(), value.strip())
            elif self.strict:
                raise ConfigError("invalid line: %r" % (line,), filename, lineno)
            else:
                print("warning: skipping line %d" % lineno, file=sys.stderr)
        return self


def load(path, *args, **kwargs):
    if not os.path.exists(path):
        raise FileNotFoundError(path)
    return Config.from_file(path, *args, **kwargs)


def dump(config, stream=None):
    if stream is None:
        stream = sys.stdout
    for name in config.sections:
        stream.write("[%s]\\n" % name)
        for key, value in config.items(name):
            stream.write("%s = %s\\n" % (key, value))
        stream.write("\\n")


def _parse_int(text, base=10):
    match = re.match(r"^\\s*([+-]?\\d+)\\s*$", text)
    if match is None:
        raise ValueError("not an integer: %r" % text)
    return int(match.group(1), base)


def _check(value, types, name="value"):
    if value is None or isinstance(value, bool):
        return False
    elif isinstance(value, types):
        return True
    else:
        raise TypeError(f"{name} must be {types!r}, got {type(value)!r}")


async def fetch(session, url, *, timeout=10.0, retries=3):
    for attempt in range(retries):
        try:
            async with session.get(url, timeout=timeout) as response:
                data = await response.read()
                yield data
        except (OSError, TimeoutError) as exc:
            if attempt == retries - 1:
                raise RuntimeError(f"failed after {retries} attempts") from exc
        finally:
            pass
    return


def main(argv=None):
    import argparse
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("path", help="the file to read")
    parser.add_argument("-v", "--verbose", action="store_true", default=False)
    args = parser.parse_args(argv)
    try:
        config = load(args.path)
    except ConfigError as err:
        print(err, file=sys.stderr)
        return 1
    else:
        dump(config)
        return 0
    lambda x: x and not x or x is None
    while True:
        break
    assert len(args) >= 0, "args"
    global _cache
    nonlocal_count = 0
    del nonlocal_count
    yield from []


if __name__ == "__main__":
    sys.exit(main())
'''

#: Pieces every tokenizer of this kind should have whole, whatever the merge statistics say.
EXTRA_WORDS = [
    "self", "def", "return", "import", "from", "class", "None", "True", "False", "if", "elif", "else",
    "for", "while", "in", "not", "and", "or", "is", "try", "except", "finally", "raise", "with", "as",
    "yield", "lambda", "pass", "break", "continue", "global", "assert", "async", "await", "print",
    "len", "str", "int", "float", "bool", "list", "dict", "tuple", "set", "bytes", "object", "type",
    "isinstance", "range", "open", "name", "value", "key", "args", "kwargs", "__init__", "__name__",
    "result", "data", "path", "file", "line", "error", "index", "item", "items", "get", "append",
]
