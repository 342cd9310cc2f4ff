"""Parsers: extract answers from model completions and reward their format."""

from verifiers.parsers.markup import reply_text, strip_markup
from verifiers.parsers.parser import Parser, extract_boxed_answer, message_text
from verifiers.parsers.think_parser import ThinkParser
from verifiers.parsers.xml_parser import XMLParser

__all__ = ["Parser", "ThinkParser", "XMLParser", "extract_boxed_answer", "message_text", "reply_text", "strip_markup"]
