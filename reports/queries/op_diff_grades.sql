-- the grade seed (emoji, labels, colour) in severity order, for the HTML key and the xlsx grade cells
select grade, emoji, label_zh, label_en, color, severity_rank
from grades
order by case when severity_rank = 0 then 99 else severity_rank end
