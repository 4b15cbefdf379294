"""Decoding algorithms: pure functions of a decoder-step callable (see step.py); none imports the model."""

from fastmt.decoding.beam import beam_search
from fastmt.decoding.greedy import DecodeOutput, greedy_search
from fastmt.decoding.jacobi import JacobiTrace, hgj_decode, jacobi_decode, pgj_decode, pj_decode
from fastmt.decoding.step import BOS_ID, EOS_ID, PAD_ID, DecoderStepFn, causal_window_mask

__all__ = ['BOS_ID', 'EOS_ID', 'PAD_ID', 'DecodeOutput', 'DecoderStepFn', 'JacobiTrace', 'beam_search', 'causal_window_mask', 'greedy_search',
           'hgj_decode', 'jacobi_decode', 'pgj_decode', 'pj_decode']
