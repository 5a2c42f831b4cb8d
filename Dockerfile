# The portal image: web (gunicorn), worker and beat all run from it with different commands.
FROM python:3.11-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
# OpenSSH's client carries staged datasets to login nodes at twice paramiko's speed (docs/decisions/0041).
RUN apt-get update && apt-get install -y --no-install-recommends openssh-client \
 && rm -rf /var/lib/apt/lists/*
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt
COPY . .
# Static files are collected with the production storage (hashed names); the secrets here exist only for this step.
RUN KAKEHASHI_PROFILE=production SECRET_KEY=collectstatic-only-not-a-secret-0123456789abcdefghijklmnop \
    KAKEHASHI_ENCRYPTION_KEYS=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA= python manage.py collectstatic --noinput -v0 \
 && useradd --system --home /app kakehashi && mkdir -p /app/var && chown kakehashi /app/var
USER kakehashi
EXPOSE 8000
CMD ["gunicorn", "portal.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3"]
