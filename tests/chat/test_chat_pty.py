#!/usr/bin/env python3
"""`foundry chat` driven through a pseudo-terminal, as a person would: the
prompt "> " appears (stdin is a terminal), a line in gives an answer streamed
and its speed, and Ctrl-D at the prompt exits with 0. A second chat, whose
answers may run to the end of the context: Ctrl-C during an answer stops it
and the conversation goes on, twice. A third: Ctrl-C at the prompt drops
the line being typed and a second Ctrl-C exits with 0.

usage: test_chat_pty.py FOUNDRY_BINARY MODEL_DIR
Exits 0 when every check passes, 1 with the terminal's output otherwise."""
import os
import pty
import select
import sys
import time

TIMEOUT = 120.0  # seconds for any one expected output (sanitizer builds)


class Terminal:
    """A child process on a pseudo-terminal and everything it wrote."""

    def __init__(self, argv):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.execv(argv[0], argv)
        self.output = b""

    def read_until(self, marker, start=0):
        """Reads until marker appears after byte offset start; returns the
        offset just after it."""
        deadline = time.monotonic() + TIMEOUT
        while True:
            at = self.output.find(marker, start)
            if at >= 0:
                return at + len(marker)
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("timed out waiting for %r" % marker)
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.fd, 4096)
                except OSError:  # EIO: the child closed the terminal
                    chunk = b""
                if not chunk:
                    raise AssertionError("the chat ended before %r" % marker)
                self.output += chunk

    def send(self, data):
        os.write(self.fd, data)

    def wait(self):
        """The exit status, reading what is left so the child never blocks."""
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status)
            ready, _, _ = select.select([self.fd], [], [], 0.1)
            if ready:
                try:
                    self.output += os.read(self.fd, 4096)
                except OSError:
                    pass
        os.kill(self.pid, 9)
        os.waitpid(self.pid, 0)
        raise AssertionError("the chat did not exit")


def conversation(chat):
    at = chat.read_until(b"> ")
    # a line in, an answer streamed, its speed, the prompt again
    chat.send(b"Hello\n")
    at = chat.read_until(b"Hello\r\n", at)
    at = chat.read_until(b"tokens/s", at)
    at = chat.read_until(b"> ", at)
    chat.send(b"Thanks\n")
    at = chat.read_until(b"tokens/s", at)
    at = chat.read_until(b"> ", at)
    # Ctrl-D at the prompt: a clean exit
    chat.send(b"\x04")
    code = chat.wait()
    if code != 0:
        raise AssertionError("Ctrl-D exited %d" % code)


def interrupt_answer(chat, line, at):
    """Sends line and Ctrl-C once its answer streams; returns the offset
    after the prompt that follows the interrupted answer."""
    chat.send(line + b"\n")
    at = chat.read_until(line + b"\r\n", at)
    deadline = time.monotonic() + TIMEOUT
    while len(chat.output) < at + 8 and time.monotonic() < deadline:
        ready, _, _ = select.select([chat.fd], [], [], 0.1)
        if ready:
            chat.output += os.read(chat.fd, 4096)
    chat.send(b"\x03")
    at = chat.read_until(b", interrupted]", at)
    return chat.read_until(b"> ", at)


def interrupts_answers(chat):
    # Ctrl-C once an answer streams stops it, and the conversation goes on
    # to the next turn, stopped the same way: the answers may run to the
    # end of the context (4,096 ids, seconds even without sanitizers), so
    # the Ctrl-C always comes before an answer ends, however late this
    # process is scheduled
    at = chat.read_until(b"> ")
    at = interrupt_answer(chat, b"Tell me a long story.", at)
    at = interrupt_answer(chat, b"Go on.", at)
    chat.send(b"\x04")
    code = chat.wait()
    if code != 0:
        raise AssertionError("Ctrl-D exited %d" % code)


def interrupts_at_prompt(chat):
    at = chat.read_until(b"> ")
    chat.send(b"half a line")
    at = chat.read_until(b"half a line", at)
    chat.send(b"\x03")
    at = chat.read_until(b"Ctrl-C again", at)
    at = chat.read_until(b"> ", at)
    # the dropped line is not a turn; a new one is
    chat.send(b"Hi\n")
    at = chat.read_until(b"> ", chat.read_until(b"tokens/s", at))
    if chat.output.count(b"; prompt ") != 1:
        raise AssertionError("the dropped line was answered")
    chat.send(b"\x03")
    at = chat.read_until(b"Ctrl-C again", at)
    chat.send(b"\x03")
    code = chat.wait()
    if code != 0:
        raise AssertionError("Ctrl-C twice exited %d" % code)


def main():
    foundry, model = sys.argv[1], sys.argv[2]
    chat = [foundry, "chat", "--model", model, "--threads", "2"]
    checks = (
        (conversation, chat + ["--system", "Answer briefly.",
                               "--max-tokens", "160"]),
        (interrupts_answers, chat),
        (interrupts_at_prompt, chat + ["--max-tokens", "4"]),
    )
    for check, argv in checks:
        terminal = Terminal(argv)
        try:
            check(terminal)
        except AssertionError as e:
            print("FAIL: %s: %s; the terminal showed:" % (check.__name__, e),
                  file=sys.stderr)
            print(terminal.output.decode("utf-8", "replace"), file=sys.stderr)
            try:
                os.kill(terminal.pid, 9)
                os.waitpid(terminal.pid, 0)
            except OSError:
                pass
            return 1
    print("all pseudo-terminal checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
