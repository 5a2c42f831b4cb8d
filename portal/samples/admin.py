from django.contrib import admin

from portal.samples.models import IdleRule, JobSamples


@admin.register(IdleRule)
class IdleRuleAdmin(admin.ModelAdmin):
    list_display = ("project", "threshold_percent", "window_seconds", "action", "cancel_after_seconds",
                    "keep_max_hours")


@admin.register(JobSamples)
class JobSamplesAdmin(admin.ModelAdmin):
    list_display = ("job", "state", "idle_since", "keep_until", "keeps", "fetched_at")
    readonly_fields = ("job", "offsets", "series", "summary")
